// safetensors.cpp: the memory-mapped safetensors reader, the model-directory (sharded) reader and the writer.
#include "harness/model/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace bpbench {

namespace fs = std::filesystem;
using nlohmann::json;

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  Mapping(void* a, size_t s) : addr(a), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(addr, size); }
};

namespace {

struct DType {
  const char* name;
  torch::ScalarType type;
  uint64_t itemsize;
};

// The safetensors dtypes LibTorch 1.13 has a type for (no U16/U32/U64 or float8).
constexpr DType kDTypes[] = {
    {"F64", torch::kDouble, 8},    {"F32", torch::kFloat, 4}, {"F16", torch::kHalf, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kLong, 8},  {"I32", torch::kInt, 4},
    {"I16", torch::kShort, 2},     {"I8", torch::kChar, 1},   {"U8", torch::kByte, 1},
    {"BOOL", torch::kBool, 1},
};

const DType* find_dtype(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string safetensors_dtype_names() {
  std::string s;
  for (const auto& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

[[noreturn]] void file_error(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format("safetensors file '{}': {}", path, what));
}

[[noreturn]] void tensor_error(const std::string& path, const std::string& name, const std::string& what) {
  throw std::runtime_error(fmt::format("safetensors file '{}': tensor '{}': {}", path, name, what));
}

// A non-negative JSON integer, or nothing (floats, negatives and non-numbers are all malformed here).
bool to_u64(const json& j, uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<uint64_t>();
  return true;
}

std::string tensor_shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

SafetensorsTensorInfo parse_entry(const std::string& path, const std::string& name, const json& e,
                                  uint64_t buffer_size) {
  if (!e.is_object()) tensor_error(path, name, "header entry is not a JSON object");
  SafetensorsTensorInfo t;
  t.name = name;
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) tensor_error(path, name, "missing or non-string \"dtype\"");
  t.dtype = dt->get<std::string>();
  const DType* d = find_dtype(t.dtype);
  if (!d)
    tensor_error(path, name,
                 fmt::format("unknown dtype '{}' (supported: {})", t.dtype, safetensors_dtype_names()));
  t.scalar_type = d->type;

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) tensor_error(path, name, "missing or non-array \"shape\"");
  // numel * itemsize in 64 bits with overflow checks: a hostile shape must not wrap around to a small size.
  uint64_t bytes = d->itemsize;
  for (const auto& dim : *sh) {
    uint64_t v = 0;
    if (!to_u64(dim, v) || v > static_cast<uint64_t>(INT64_MAX))
      tensor_error(path, name,
                   fmt::format("shape {} has an entry that is not a non-negative integer", sh->dump()));
    if (__builtin_mul_overflow(bytes, v, &bytes))
      tensor_error(path, name, fmt::format("shape {} is too large", sh->dump()));
    t.shape.push_back(static_cast<int64_t>(v));
  }

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !to_u64((*off)[0], t.begin) ||
      !to_u64((*off)[1], t.end))
    tensor_error(path, name, "\"data_offsets\" must be [begin, end] with non-negative integers");
  if (t.begin > t.end)
    tensor_error(path, name, fmt::format("data_offsets [{}, {}] end before they begin", t.begin, t.end));
  if (t.end - t.begin != bytes)
    tensor_error(path, name,
                 fmt::format("data_offsets [{}, {}] hold {} bytes but {} {} needs {}", t.begin, t.end,
                             t.end - t.begin, t.dtype, tensor_shape_str(t.shape), bytes));
  if (t.end > buffer_size)
    tensor_error(path, name,
                 fmt::format("data_offsets [{}, {}] are out of bounds: the data buffer has only {} bytes "
                             "(truncated file?)",
                             t.begin, t.end, buffer_size));
  return t;
}

void write_le_u64(std::ostream& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  out.write(b, 8);
}

}  // namespace

std::string safetensors_dtype_name(torch::ScalarType type) {
  for (const auto& d : kDTypes)
    if (d.type == type) return d.name;
  throw std::invalid_argument(fmt::format("safetensors has no dtype for {} (supported: {})",
                                          c10::toString(type), safetensors_dtype_names()));
}

// ---- SafetensorsFile
// -------------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) file_error(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    file_error(path, "not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    file_error(path, fmt::format("file is {} bytes, shorter than the 8-byte header length", size));
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (addr == MAP_FAILED) file_error(path, fmt::format("mmap failed: {}", std::strerror(map_errno)));
  map_ = std::make_shared<const Mapping>(addr, size);
  const auto* bytes = static_cast<const uint8_t*>(addr);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > size - 8)
    file_error(path, fmt::format("header length {} is larger than the {} bytes that follow it", n, size - 8));
  const uint64_t buffer_size = size - 8 - n;
  buffer_ = bytes + 8 + n;

  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + n);
  } catch (const json::exception& e) {
    file_error(path, fmt::format("malformed JSON header: {}", e.what()));
  }
  if (!header.is_object()) file_error(path, "malformed JSON header: not a JSON object");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) file_error(path, "\"__metadata__\" is not a JSON object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          file_error(path, fmt::format("\"__metadata__\" value of '{}' is not a string", k));
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(parse_entry(path, key, value, buffer_size));
  }

  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto *prev = by_offset[i - 1], *cur = by_offset[i];
    // Empty tensors occupy no bytes, so they cannot overlap anything.
    if (cur->begin < prev->end && cur->begin != cur->end && prev->begin != prev->end)
      tensor_error(path, cur->name,
                   fmt::format("data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]", cur->begin, cur->end,
                               prev->name, prev->begin, prev->end));
  }
}

const SafetensorsTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsTensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto* t = find(name);
  if (!t) tensor_error(path_, name, "no such tensor");
  return *t;
}

torch::Tensor SafetensorsFile::get(const std::string& name, const torch::TensorOptions& options) const {
  const auto& t = info(name);
  const auto dtype = options.has_dtype() ? options.dtype().toScalarType() : t.scalar_type;
  const auto device = options.device();
  if (t.begin == t.end) return torch::empty(t.shape, torch::TensorOptions().dtype(dtype).device(device));
  const uint8_t* p = buffer_ + t.begin;
  const auto file_opts = torch::TensorOptions().dtype(t.scalar_type);
  torch::Tensor src;
  if (reinterpret_cast<uintptr_t>(p) % c10::elementSize(t.scalar_type) != 0) {
    // Headers need not pad to alignment; kernels may assume element-aligned data, so bounce through a copy.
    src = torch::empty(t.shape, file_opts);
    std::memcpy(src.data_ptr(), p, t.end - t.begin);
  } else {
    // The deleter owns a reference to the mapping, so the blob stays valid however long `src` lives.
    src = torch::from_blob(
        const_cast<uint8_t*>(p), t.shape, [keep = map_](void*) {}, file_opts);
  }
  // copy = true: never hand out a tensor that aliases the read-only mapping.
  return src.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

// ---- SafetensorsDir
// ---------------------------------------------------------------------------------------------

SafetensorsDir::SafetensorsDir(const std::string& dir) : dir_(dir) {
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  if (fs::exists(index_path)) {
    const std::string ip = index_path.string();
    std::ifstream in(index_path);
    if (!in) throw std::runtime_error(fmt::format("safetensors index '{}': cannot open", ip));
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception& e) {
      throw std::runtime_error(fmt::format("safetensors index '{}': malformed JSON: {}", ip, e.what()));
    }
    auto wm = index.is_object() ? index.find("weight_map") : index.end();
    if (wm == index.end() || !wm->is_object())
      throw std::runtime_error(fmt::format("safetensors index '{}': missing \"weight_map\" object", ip));
    std::map<std::string, size_t> file_index;
    for (const auto& [tensor, file] : wm->items()) {
      // Shards must be files of this directory: an index must not reach elsewhere on the disk.
      if (!file.is_string() || file.get<std::string>().empty() ||
          file.get<std::string>().find('/') != std::string::npos || file.get<std::string>() == "..")
        throw std::runtime_error(
            fmt::format("safetensors index '{}': tensor '{}' maps to {}, not a file name in the directory",
                        ip, tensor, file.dump()));
      const std::string name = file.get<std::string>();
      auto [it, added] = file_index.emplace(name, files_.size());
      if (added) files_.emplace_back((fs::path(dir) / name).string());
      if (!files_[it->second].find(tensor))
        throw std::runtime_error(
            fmt::format("safetensors index '{}': tensor '{}' is mapped to '{}', which has no "
                        "such tensor",
                        ip, tensor, name));
      where_[tensor] = it->second;
    }
  } else if (fs::exists(single_path)) {
    files_.emplace_back(single_path.string());
    for (const auto& t : files_[0].tensors()) where_[t.name] = 0;
  } else {
    throw std::runtime_error(fmt::format(
        "model directory '{}': no weights (neither model.safetensors nor model.safetensors.index.json)",
        dir));
  }
}

std::vector<std::string> SafetensorsDir::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

const std::string& SafetensorsDir::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    throw std::runtime_error(fmt::format("model directory '{}': no tensor '{}'", dir_, name));
  return files_[it->second].path();
}

const SafetensorsTensorInfo& SafetensorsDir::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    throw std::runtime_error(fmt::format("model directory '{}': no tensor '{}'", dir_, name));
  return files_[it->second].info(name);
}

torch::Tensor SafetensorsDir::get(const std::string& name, const torch::TensorOptions& options) const {
  auto it = where_.find(name);
  if (it == where_.end())
    throw std::runtime_error(fmt::format("model directory '{}': no tensor '{}'", dir_, name));
  return files_[it->second].get(name, options);
}

// ---- writer
// -----------------------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw std::invalid_argument(fmt::format("safetensors: '{}' is not a valid tensor name", name));
    if (!seen.insert(name).second)
      throw std::invalid_argument(fmt::format("safetensors: tensor '{}' is given twice", name));
    auto t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", json::array({offset, offset + bytes})}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // spaces are allowed after the JSON and align the buffer

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(fmt::format("safetensors file '{}': cannot open for writing", path));
  write_le_u64(out, h.size());
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : data)
    if (t.numel() > 0)
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
  out.close();
  if (!out) throw std::runtime_error(fmt::format("safetensors file '{}': write failed", path));
}

void save_safetensors_dir(const std::string& dir, const NamedTensors& tensors, int64_t shards,
                          const std::map<std::string, std::string>& metadata) {
  fs::create_directories(dir);
  const int64_t n = static_cast<int64_t>(tensors.size());
  if (shards <= 1 || n <= 1) {
    save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, metadata);
    return;
  }
  shards = std::min(shards, n);
  json weight_map = json::object();
  uint64_t total = 0;
  for (int64_t k = 0; k < shards; ++k) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards);
    NamedTensors part(tensors.begin() + k * n / shards, tensors.begin() + (k + 1) * n / shards);
    for (const auto& [name, t] : part) {
      weight_map[name] = file;
      total += static_cast<uint64_t>(t.numel()) * t.element_size();
    }
    save_safetensors((fs::path(dir) / file).string(), part, metadata);
  }
  const std::string ip = (fs::path(dir) / "model.safetensors.index.json").string();
  std::ofstream out(ip, std::ios::trunc);
  out << json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) << "\n";
  out.close();
  if (!out) throw std::runtime_error(fmt::format("safetensors index '{}': write failed", ip));
}

}  // namespace bpbench
