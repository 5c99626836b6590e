// test_files.h: what the tests that touch files share: a private directory per test, removed afterwards; the
// config.json transformers writes for a model; and the committed results fixture of the report tests.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/model/model_config.h"

namespace bpbench::testing {

// The whole text of a file ("" when it cannot be read).
inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh directory named after the running test (and this process), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("bpbench-{}-{}-{}", info->test_suite_name(), info->name(), ::getpid());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& dir() const { return path_; }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // A subdirectory, created (a model directory's basename becomes its ModelConfig name).
  std::string sub(const std::string& name) const {
    std::filesystem::create_directories(path_ / name);
    return (path_ / name).string();
  }

 private:
  std::filesystem::path path_;
};

// `rope` as a 4.x config.json's "rope_scaling" (null for the default type): rope_to_json without what the
// file states at its top level (rope_theta, max_position_embeddings).
inline nlohmann::json rope_scaling(const RopeConfig& rope) {
  if (rope.type == RopeType::kDefault) return nullptr;
  nlohmann::json j = rope_to_json(rope);
  j.erase("rope_theta");
  j.erase("max_position_embeddings");
  return j;
}

// config.json as transformers writes it for `c`.
inline nlohmann::json hf_config(const ModelConfig& c, const std::string& architecture) {
  return {{"architectures", nlohmann::json::array({architecture})},
          {"hidden_act", "silu"},
          {"vocab_size", c.vocab},
          {"hidden_size", c.hidden},
          {"intermediate_size", c.intermediate},
          {"num_hidden_layers", c.layers},
          {"num_attention_heads", c.heads},
          {"num_key_value_heads", c.kv_heads},
          {"head_dim", c.head_dim},
          {"rope_theta", c.rope.theta},
          {"max_position_embeddings", c.rope.max_positions},
          {"rms_norm_eps", c.rms_eps},
          {"tie_word_embeddings", c.tie_embeddings},
          {"torch_dtype", "float32"},
          {"rope_scaling", rope_scaling(c.rope)}};
}

// tests/fixtures/results_small.json: a results file with every feature the report and compare read.
inline const std::filesystem::path& results_fixture() {
  static const std::filesystem::path p =
      std::filesystem::path(BPBENCH_SOURCE_DIR) / "tests" / "fixtures" / "results_small.json";
  return p;
}

// Newline characters in `s`.
inline long newlines(const std::string& s) {
  return static_cast<long>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace bpbench::testing
