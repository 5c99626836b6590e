// data_file.h: token ids from a data file (scenario key "data") instead of synthetic ones, and SHA-256.
//
// The file is JSON: a non-empty list of non-empty lists of token ids, e.g. [[151644, 872, 198], [9707, 11]].
// Each sequence is cropped or right-padded with -1 to the scenario's seq_len; BatchSpec::data_tokens takes
// the result and make_token_batch reads -1 as padding. The SHA-256 of the file's bytes goes into the results
// so a run names exactly the data it saw.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace bpbench {

struct TokenData {
  torch::Tensor tokens;   // (M, T) int64 on the CPU, -1 = padding
  std::string file_name;  // the file's basename (results stay free of machine-specific paths)
  std::string sha256;     // lowercase hex digest of the file's bytes
  int64_t sequences = 0;  // M
};

// Throws std::runtime_error (one line, naming the file) for a missing or unreadable file, malformed JSON, a
// value that is not a list of lists of integers, an empty list or sequence, or an id outside [0, vocab).
TokenData load_token_data(const std::string& path, int64_t seq_len, int64_t vocab);

// Lowercase hex SHA-256 (FIPS 180-4), self-contained so bpbench needs no crypto library.
std::string sha256_hex(const void* data, size_t size);
inline std::string sha256_hex(const std::string& bytes) {
  return sha256_hex(bytes.data(), bytes.size());
}

}  // namespace bpbench
