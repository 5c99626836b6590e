// safetensors.h: read and write the safetensors format, single files and Hugging Face model directories.
//
// Format (https://huggingface.co/docs/safetensors): an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON
//   {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {str:
//   str}}
// (optionally right-padded with spaces), then the byte buffer. Offsets are relative to the buffer's start;
// every tensor must lie inside it, tensors must not overlap, and end - begin == numel * itemsize. Data is
// little-endian and row-major; bpbench assumes a little-endian host (every platform LibTorch supports).
//
// The reader memory-maps the file read-only and validates the whole header when the file is opened, so a
// broken file fails before any weight is copied. get() copies a tensor out of the mapping straight into the
// requested device and dtype: the result never aliases the (read-only) mapping, so it is safe to train in
// place. Every error is a one-line std::runtime_error naming the file and, where there is one, the tensor.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace bpbench {

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;  // as written in the header: "F32", "BF16", ...
  torch::ScalarType scalar_type = torch::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the start of the byte buffer
};

// The safetensors dtype name of a LibTorch dtype ("F32" for kFloat); throws std::invalid_argument if it has
// none.
std::string safetensors_dtype_name(torch::ScalarType type);

class SafetensorsFile {
 public:
  // Maps `path` and validates its header and offsets; throws std::runtime_error naming the file (and tensor).
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensorInfo* find(const std::string& name) const;  // nullptr when absent
  const SafetensorsTensorInfo& info(const std::string& name) const;  // throws naming file and tensor

  // A fresh copy of tensor `name` on `options`' device and dtype (the file's dtype when `options` has none).
  torch::Tensor get(const std::string& name, const torch::TensorOptions& options = {}) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<const Mapping> map_;
  const uint8_t* buffer_ = nullptr;  // start of the byte buffer inside the mapping
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The tensors of a Hugging Face model directory: `model.safetensors`, or the shards that
// `model.safetensors.index.json` ({"weight_map": {tensor: file}}) names. The index is authoritative: a tensor
// it maps must be in its shard; tensors a shard holds beyond the index are not listed.
class SafetensorsDir {
 public:
  explicit SafetensorsDir(const std::string& dir);  // throws std::runtime_error when neither file is there

  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorsTensorInfo& info(const std::string& name) const;  // throws naming the directory and tensor
  const std::string& file_of(const std::string& name) const;         // the path of the file holding `name`
  torch::Tensor get(const std::string& name, const torch::TensorOptions& options = {}) const;

 private:
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes `tensors` (any device; made contiguous on the CPU) in the given order to one safetensors file. The
// header is space-padded so the buffer starts 8-byte aligned. Throws std::invalid_argument for a duplicate or
// reserved name or a dtype safetensors has no name for, std::runtime_error when the file cannot be written.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes `tensors` into directory `dir` (created if needed) the way Hugging Face does: shards <= 1 gives
// `model.safetensors`; otherwise `model-0000k-of-0000n.safetensors` files, consecutive tensors split evenly
// by count, plus `model.safetensors.index.json` with "metadata": {"total_size"} and "weight_map".
void save_safetensors_dir(const std::string& dir, const NamedTensors& tensors, int64_t shards = 1,
                          const std::map<std::string, std::string>& metadata = {});

}  // namespace bpbench
