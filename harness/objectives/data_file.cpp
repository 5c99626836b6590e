// data_file.cpp: the token data file reader and a small SHA-256.
#include "harness/objectives/data_file.h"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace bpbench {

namespace {

constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

inline uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

void compress(std::array<uint32_t, 8>& h, const uint8_t* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) |
           (uint32_t{block[4 * i + 2]} << 8) | uint32_t{block[4 * i + 3]};
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const uint32_t ch = (e & f) ^ (~e & g);
    const uint32_t t1 = hh + S1 + ch + kRoundConstants[i] + w[i];
    const uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = S0 + maj;
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

[[noreturn]] void data_error(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format("data file '{}': {}", path, what));
}

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* p = static_cast<const uint8_t*>(data);
  size_t full = size / 64;
  for (size_t i = 0; i < full; ++i) compress(h, p + 64 * i);
  // Tail: the rest, a 0x80 byte, zeros, and the bit length big-endian; one block, or two when < 9 bytes
  // remain.
  uint8_t tail[128] = {};
  const size_t rest = size % 64;
  for (size_t i = 0; i < rest; ++i) tail[i] = p[64 * full + i];
  tail[rest] = 0x80;
  const size_t blocks = rest + 9 <= 64 ? 1 : 2;
  const uint64_t bits = static_cast<uint64_t>(size) * 8;
  for (int i = 0; i < 8; ++i) tail[64 * blocks - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  for (size_t b = 0; b < blocks; ++b) compress(h, tail + 64 * b);
  std::string out;
  for (uint32_t v : h) out += fmt::format("{:08x}", v);
  return out;
}

TokenData load_token_data(const std::string& path, int64_t seq_len, int64_t vocab) {
  if (seq_len < 1) data_error(path, fmt::format("seq_len must be >= 1, got {}", seq_len));
  if (vocab < 1) data_error(path, fmt::format("vocab must be >= 1, got {}", vocab));
  std::ifstream in(path, std::ios::binary);
  if (!in) data_error(path, "cannot open (missing or unreadable)");
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  if (in.bad()) data_error(path, "read failed");

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    data_error(path, fmt::format("malformed JSON: {}", e.what()));
  }
  const char* shape = "expected a list of lists of token ids, e.g. [[1, 2, 3], [4, 5]]";
  if (!j.is_array()) data_error(path, fmt::format("{}; the top level is not a list", shape));
  if (j.empty()) data_error(path, "the list of sequences is empty");

  const int64_t M = static_cast<int64_t>(j.size());
  auto tokens = torch::full({M, seq_len}, -1, torch::TensorOptions().dtype(torch::kLong));
  auto acc = tokens.accessor<int64_t, 2>();
  for (int64_t n = 0; n < M; ++n) {
    const auto& seq = j[static_cast<size_t>(n)];
    if (!seq.is_array()) data_error(path, fmt::format("{}; sequence {} is not a list", shape, n));
    if (seq.empty()) data_error(path, fmt::format("sequence {} is empty", n));
    // Every id is checked, cropped ones too: a bad id anywhere means the file was made for another
    // vocabulary.
    for (size_t t = 0; t < seq.size(); ++t) {
      const auto& v = seq[t];
      if (!v.is_number_integer())
        data_error(path, fmt::format("{}; sequence {} position {} is {}", shape, n, t, v.dump()));
      const bool negative = v.is_number_unsigned() ? false : v.get<int64_t>() < 0;
      const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() >= static_cast<uint64_t>(vocab);
      if (negative || too_big)
        data_error(path, fmt::format("sequence {} position {}: token id {} is outside [0, {})", n, t,
                                     v.dump(), vocab));
      if (static_cast<int64_t>(t) < seq_len) acc[n][static_cast<int64_t>(t)] = v.get<int64_t>();
    }
  }
  TokenData d;
  d.tokens = tokens;
  d.file_name = std::filesystem::path(path).filename().string();
  d.sha256 = sha256_hex(bytes);
  d.sequences = M;
  return d;
}

}  // namespace bpbench
