// test_support.h: what the tests share: a private directory per test, file text, the config.json
// transformers writes for a model, the committed results fixture; a configurable tiny model, one step of a
// strategy and a comparison of every parameter's gradient that names the worst offender; and the cached
// output of a Python script the tests read (the transformers oracle, the official StreamBP check).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <torch/torch.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/model/model.h"
#include "harness/model/model_config.h"
#include "harness/model/safetensors.h"
#include "harness/objectives/objective.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/offload.h"

namespace bpbench::testing {

// ---- Python

// Whether the project's Python (BPBENCH_PYTHON) has transformers installed: found, not imported (an import of
// transformers and torch costs 4 to 9 s of CPU here, and the tests that need it import it themselves). Asked
// once per process.
inline bool python_has_transformers() {
  static const bool found =
      std::system(fmt::format("'{}' -c 'import importlib.util, sys; "
                              "sys.exit(importlib.util.find_spec(\"transformers\") is None)' >/dev/null 2>&1",
                              BPBENCH_PYTHON)
                      .c_str()) == 0;
  return found;
}

// ---- Names

// A parameterised case's name as GoogleTest takes it (letters, digits, underscores): the '-' of strategy
// names and the '.' of preset names ("tiny-qwen3.5") become '_'.
// A tiny preset's family for a parameterised case's label: "" for tiny, "_moe" for tiny-moe, "_olmo3" for
// tiny-olmo3.
inline std::string test_name(std::string name) {
  for (char& c : name)
    if (c == '-' || c == '.') c = '_';
  return name;
}

inline std::string preset_suffix(const std::string& preset) {
  return preset == "tiny" ? "" : test_name("_" + preset.substr(preset.find('-') + 1));  // _gpt_oss
}

// ---- Files

// The whole text of a file ("" when it cannot be read).
inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `j` as an indented JSON file at `path`; a failure when it cannot be written.
inline void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  ASSERT_TRUE(out.good()) << path;
}

// The one-line message of the std::runtime_error `f` throws; a failure if it throws nothing, something
// else, or a message of more than one line.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message is not one line: " << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than std::runtime_error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// A JSON file parsed (throws, failing the test, when it cannot be read).
inline nlohmann::json json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return nlohmann::json::parse(in);
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

// A model's parameters by name, as a checkpoint holds them.
inline NamedTensors named_tensors_of(const Model& m) {
  NamedTensors out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.name, p.tensor);
  for (const auto& b : m.named_buffers()) out.emplace_back(b.name, b.tensor);
  return out;
}

// A Hugging Face model directory: `config` as its config.json, `tensors` in `shards` safetensors files
// (model.safetensors, or shards and their index), as the loader and a scenario's model axis read it.
inline void write_hf_model_dir(const std::filesystem::path& dir, const nlohmann::json& config,
                               const NamedTensors& tensors, int64_t shards = 1) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / "config.json");
  out << config.dump(2);
  ASSERT_TRUE(out.good()) << dir;
  out.close();
  save_safetensors_dir(dir.string(), tensors, shards);
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

// ---- Models, steps and gradients

struct TinyShape {
  int64_t kv_heads = 2;  // tiny has 4 query heads: GQA ratio 4 / kv_heads
  bool tied = false;
  bool attention_bias = false;
  bool qk_norm = true;
};

inline Model tiny_model(const TinyShape& shape, torch::ScalarType dtype = torch::kDouble, uint64_t seed = 7) {
  ModelConfig c = find_model_preset("tiny");
  c.kv_heads = shape.kv_heads;
  c.tie_embeddings = shape.tied;
  c.attention_bias = shape.attention_bias;
  c.qk_norm = shape.qk_norm;
  Model m = Model::random(c, torch::TensorOptions().dtype(dtype), seed);
  // Norm weights at 1 would hide a wrong norm gradient path; make them distinct.
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed + 1);
  for (auto& p : m.named_parameters())
    if (p.group == ParamGroup::norms) p.tensor.add_(0.1 * torch::randn(p.tensor.sizes(), p.tensor.options()));
  return m;
}

// A mixture of experts' router weights drawn wide (std 0.5): routing that decides something (the init's
// 0.02 leaves every probability near 1 / E), far from ties.
inline void spread_routers(Model& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& w : m.layers)
    if (w.router.defined()) w.router.normal_(0.0, 0.5);
}

// Two right-padded SFT sequences of `seq_len` tokens from a fixed seed: the batch the model tests share.
inline Batch padded_sft_batch(Model& model, const Objective& objective, int64_t seq_len = 13) {
  BatchSpec s;
  s.examples = 2;
  s.seq_len = seq_len;
  s.padding = true;
  s.seed = 5;
  s.vocab = model.config.vocab;
  return objective.make_batch(s, model, seq_len);
}

// The batch the exactness tests share: two right-padded examples of `seq_len` tokens, seed 3; DPO and GRPO
// prompts of `prompt_len` tokens (chosen longer than the partitions a test runs), GRPO groups of 3.
inline BatchSpec padded_batch_spec(const std::string& objective, int64_t vocab, int64_t seq_len,
                                   int64_t prompt_len) {
  BatchSpec s;
  s.examples = 2;
  s.seq_len = seq_len;
  s.padding = true;
  s.prompt_len = objective == "sft" ? -1 : prompt_len;
  s.group = 3;
  s.beta = 0.1;
  s.seed = 3;
  s.vocab = vocab;
  return s;
}

struct StepResult {
  double loss = 0;
  std::vector<std::string> names;
  std::vector<torch::Tensor> grads;  // float64 copies, one per trainable parameter (zeros if none arrived)
};

// `checkpoints`: the runner's checkpoint store (impls/machinery/offload.h), e.g. an offloading one; null: on
// the device.
inline StepResult run_step(const std::string& impl, Model& model, const Batch& batch,
                           const Objective& objective, Partitioning partition,
                           CheckpointStore* checkpoints = nullptr) {
  for (auto& p : model.trainable_parameters()) p.tensor.mutable_grad().reset();
  auto strategy = make_strategy(impl);
  StepInputs in{model, batch, objective, partition, checkpoints};
  StepResult r;
  r.loss = strategy->step(in).item<double>();
  for (auto& p : model.trainable_parameters()) {
    r.names.push_back(p.name);
    auto g = p.tensor.grad();
    r.grads.push_back(g.defined() ? g.detach().to(torch::kDouble).clone()
                                  : torch::zeros_like(p.tensor, torch::kDouble));
  }
  return r;
}

// Relative L2 error of every gradient (and of the loss) must be below `tol`; a zero reference gradient must
// be matched to `tol` in absolute terms. Every parameter is checked, not a sample.
inline void expect_same_gradients(const StepResult& ref, const StepResult& got, double tol,
                                  const std::string& what) {
  ASSERT_EQ(ref.names, got.names) << what;
  EXPECT_LE(std::abs(got.loss - ref.loss), tol * std::max(1.0, std::abs(ref.loss)))
      << what << ": loss " << got.loss << " vs " << ref.loss;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    const double ref_norm = ref.grads[i].norm().item<double>();
    const double diff = (got.grads[i] - ref.grads[i]).norm().item<double>();
    EXPECT_LE(diff, tol * std::max(ref_norm, 1e-12))
        << what << ": gradient of " << ref.names[i] << " differs, relative error " << diff / ref_norm;
  }
  for (const auto& g : ref.grads) EXPECT_TRUE(torch::isfinite(g).all().item<bool>()) << what;
}

// ---- Python scripts' output

// The output directory of a Python script, made once per build tree. ctest runs every test in its own
// process, so the output is cached under BPBENCH_BINARY_DIR/<cache>/<hash of the python and every file the
// script runs>, made under a file lock and moved into place whole. Empty `skip` and `error` mean `dir` holds
// it.
struct PythonOutput {
  std::filesystem::path dir;
  std::string skip, error;
};

// Runs `python SCRIPT OUT_DIR EXTRA_ARGS` unless `cache` already holds its output (OUT_DIR/`done_file`).
// `sources`: the script and every file it loads (their contents key the cache). `skip_reason`, when not
// empty, is returned as `skip` without running anything (what the script needs is missing here).
inline PythonOutput cached_python_output(const std::string& cache,
                                         const std::vector<std::filesystem::path>& sources,
                                         const std::string& extra_args, const std::string& done_file,
                                         const std::string& skip_reason = "") {
  namespace fs = std::filesystem;
  PythonOutput r;
  if (!skip_reason.empty()) {
    r.skip = skip_reason;
    return r;
  }
  const std::string python = BPBENCH_PYTHON;
  std::string key = python + extra_args;
  for (const auto& s : sources) key += file_text(s);
  const fs::path root = fs::path(BPBENCH_BINARY_DIR) / cache;
  r.dir = root / fmt::format("{:016x}", std::hash<std::string>{}(key));
  fs::create_directories(root);
  const int lock = ::open((root / "lock").c_str(), O_CREAT | O_RDWR, 0644);
  ::flock(lock, LOCK_EX);
  if (!fs::exists(r.dir / done_file)) {
    const fs::path tmp = r.dir.string() + ".tmp", log = r.dir.string() + ".log";
    fs::remove_all(tmp);
    const std::string cmd = fmt::format("'{}' '{}' '{}' {} >'{}' 2>&1", python, sources.front().string(),
                                        tmp.string(), extra_args, log.string());
    if (std::system(cmd.c_str()) != 0)
      r.error = fmt::format("{} failed:\n{}", sources.front().filename().string(), file_text(log));
    else
      fs::rename(tmp, r.dir);
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return r;
}

// The scripts whose output the tests read, made at build time (tests/CMakeLists.txt runs the test binary with
// --bpbench-make-python-outputs after it links): the oracles then cost a fresh clone's ctest nothing. A file
// registers its maker with `const bool made = made_at_build_time(&its_maker);`; a script that fails at build
// time is run again by its tests, which fail with its log.
using PythonOutputMaker = const PythonOutput& (*)();
inline std::vector<PythonOutputMaker>& python_output_makers() {
  static std::vector<PythonOutputMaker> makers;
  return makers;
}
inline bool made_at_build_time(PythonOutputMaker maker) {
  python_output_makers().push_back(maker);
  return true;
}

// For a fixture's SetUp: the test skips when the script could not run here (`run.skip`), but fails under CI
// (CI=true), where `what` must run; a script that failed fails the test with its log.
inline void require_python_output(const PythonOutput& run, const std::string& what) {
  if (!run.skip.empty()) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL() << run.skip << " (under CI " << what << " must run)";
    GTEST_SKIP() << run.skip;
  }
  ASSERT_TRUE(run.error.empty()) << run.error;
}

}  // namespace bpbench::testing
