// hf_config_reader.h: typed, one-line-error reads of a transformers config.json object (hf_model.cpp and
// hf_gemma3.cpp). Internal to harness/model.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace bpbench {

class ConfigReader {
 public:
  ConfigReader(std::string path, const nlohmann::json& j) : path_(std::move(path)), j_(j) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(fmt::format("Hugging Face config '{}': {}", path_, what));
  }

  // Absent and null both mean "use the default" (HF writes null for unset optional fields).
  const nlohmann::json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const nlohmann::json* v = find(key);
    if (!v) {
      if (!fallback) fail(fmt::format("missing \"{}\"", key));
      return *fallback;
    }
    if (!v->is_number_integer()) fail(fmt::format("\"{}\" must be an integer, got {}", key, v->dump()));
    return v->get<int64_t>();
  }

  double number(const char* key, double fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) fail(fmt::format("\"{}\" must be a number, got {}", key, v->dump()));
    return v->get<double>();
  }

  bool boolean(const char* key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(fmt::format("\"{}\" must be true or false, got {}", key, v->dump()));
    return v->get<bool>();
  }

  const nlohmann::json& json() const { return j_; }  // the whole object (rope_from_hf_config reads it)

  std::string string(const char* key) const {
    const nlohmann::json* v = find(key);
    return v && v->is_string() ? v->get<std::string>() : std::string();
  }

 private:
  std::string path_;
  const nlohmann::json& j_;
};

}  // namespace bpbench
