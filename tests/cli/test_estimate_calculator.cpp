// test_estimate_calculator.cpp: `bpbench estimate` as a calculator (harness/cli/estimate_request.h):
//   - every input form of --model (a preset, a Hugging Face directory, its config.json, and a config.json
//   that
//     transformers itself wrote, for each family) gives the preset's estimate; bad ones are one-line errors;
//   - lengths and byte sizes with units;
//   - the inverse: the longest length fits and one granularity more does not, on the device or the host;
//   - --gpu and --reserve, --gpu all; --json against reports/estimate.schema.json; --plot's PNG.
// The inverse against a measured max-length search: tests/run/test_runner_features.cpp
// (MaxSeqLenSearchFindsTheExactBoundary).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <utility>

#include "harness/cli/accelerators.h"
#include "harness/cli/estimate_command.h"
#include "harness/cli/estimate_output.h"
#include "harness/cli/estimate_request.h"
#include "harness/cli/quantities.h"
#include "harness/estimate/estimate.h"
#include "harness/model/hf_model.h"
#include "harness/run/json_schema.h"
#include "tests/support/test_support.h"
#include "tests/support/transformers_configs.h"

namespace bpbench::test_estimate_calculator {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::file_text;
using testing::TempDir;

json estimate_doc(std::vector<std::string> args) {
  args.push_back("--json");
  std::ostringstream out;
  EXPECT_EQ(estimate_command(args, out), 0);
  return json::parse(out.str());
}

// What must not depend on how the model was given: every number.
json numbers_of(const json& doc) {
  return {{"estimates", doc.at("estimates")}, {"longest", doc.at("longest")}, {"setting", doc.at("setting")}};
}

const std::vector<std::string> kSetting = {"--seq-len", "4k,32k",   "--gpu",     "h100-sxm",
                                           "--dtype",   "bfloat16", "--threads", "1"};

std::vector<std::string> with_model(const std::string& model, std::vector<std::string> rest = kSetting) {
  rest.insert(rest.begin(), {"--model", model});
  return rest;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string one_line_error(const std::vector<std::string>& args) {
  std::ostringstream sink;
  try {
    estimate_command(args, sink);
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << fmt::format("{}", fmt::join(args, " "));
  return "";
}

TEST(EstimateCalculator, ADirectoryAndItsConfigJsonGiveThePresetsEstimate) {
  TempDir tmp;
  for (const std::string preset :
       {"qwen3-8b", "llama3.1-8b", "gemma3-1b", "small-gemma3", "mistral-7b", "phi3-mini"}) {
    const std::string dir = tmp.sub(preset);
    write_text(dir + "/config.json", hf_config_json(find_model_preset(preset)).dump(2));
    const json from_preset = estimate_doc(with_model(preset));
    EXPECT_EQ(from_preset["model"]["source"], "preset");
    for (const std::string& given : {dir, dir + "/config.json"}) {
      const json doc = estimate_doc(with_model(given));
      EXPECT_EQ(doc["model"]["source"], "hf-config");
      EXPECT_EQ(doc["model"]["name"], preset) << given;  // the directory's name, also from the file
      EXPECT_EQ(numbers_of(doc), numbers_of(from_preset)) << given;
    }
  }
}

// The working directory for one scope (a model named relative to it).
class InDirectory {
 public:
  explicit InDirectory(const fs::path& dir) : before_(fs::current_path()) { fs::current_path(dir); }
  ~InDirectory() { fs::current_path(before_); }
  InDirectory(const InDirectory&) = delete;
  InDirectory& operator=(const InDirectory&) = delete;

 private:
  fs::path before_;
};

// A model directory named as a preset is the model meant (a checkpoint downloaded into ./qwen3-4b): it wins,
// and the first line says so; a folder of that name without config.json is not a model, and the preset
// stays.
TEST(EstimateCalculator, AModelDirectoryNamedAsAPresetWins) {
  TempDir tmp;
  const std::string dir = tmp.sub("qwen3-4b");
  ModelConfig other = find_model_preset("small");
  write_text(dir + "/config.json", hf_config_json(other).dump(2));
  const std::vector<std::string> args = {"--model", "qwen3-4b", "--seq-len", "1k", "--threads", "1"};
  const json preset = estimate_doc(args);
  EXPECT_EQ(preset["model"]["source"], "preset");
  {
    InDirectory here(tmp.dir());
    const json doc = estimate_doc(args);
    EXPECT_EQ(doc["model"]["source"], "hf-config");
    EXPECT_EQ(doc["model"]["name"], "qwen3-4b");
    EXPECT_LT(doc["estimates"][0]["memory"]["peak_bytes"], preset["estimates"][0]["memory"]["peak_bytes"]);
    std::ostringstream text;
    estimate_command(args, text);
    EXPECT_EQ(text.str().rfind("qwen3-4b (Hugging Face config), float32", 0), 0u) << text.str();
    fs::remove(dir + "/config.json");
    EXPECT_EQ(estimate_doc(args)["model"]["source"], "preset");
  }
}

// Without --dtype a CUDA estimate is of bfloat16 (what users train in) or of the dtype config.json names;
// the CPU's stays float32 (a scenario's default); the first line says where the dtype came from.
TEST(EstimateCalculator, ACudaEstimateDefaultsToTheTrainingDtype) {
  auto dtype_of = [](std::vector<std::string> args) {
    const EstimateRequest r = parse_estimate_request(args);
    return std::pair(std::string(dtype_flag_name(r.in.dtype)), r.dtype_source);
  };
  using Answer = std::pair<std::string, std::string>;
  EXPECT_EQ(dtype_of({"--model", "qwen3-8b", "--gpu", "h100-sxm"}), Answer("bfloat16", "the CUDA default"));
  EXPECT_EQ(dtype_of({"--model", "qwen3-8b", "--seq-len", "8k", "--device", "cuda"}),
            Answer("bfloat16", "the CUDA default"));
  EXPECT_EQ(dtype_of({"--model", "qwen3-8b", "--seq-len", "8k"}).first, "float32");
  EXPECT_EQ(dtype_of({"--model", "qwen3-8b", "--gpu", "h100-sxm", "--dtype", "float32"}),
            Answer("float32", "--dtype"));
  TempDir tmp;
  json config = hf_config_json(find_model_preset("qwen3-8b"));
  const std::string dir = tmp.sub("m");
  for (const auto& [field, named, answer] :
       {std::tuple("dtype", "float32", Answer("float32", "config.json's dtype")),
        std::tuple("torch_dtype", "bfloat16", Answer("bfloat16", "config.json's dtype")),
        std::tuple("torch_dtype", "float16",
                   Answer("bfloat16", "config.json's float16 as bfloat16: the same bytes"))}) {
    json c = config;
    c[field] = named;
    write_text(dir + "/config.json", c.dump());
    EXPECT_EQ(dtype_of({"--model", dir, "--gpu", "h100-sxm"}), answer) << field << " " << named;
  }
  std::ostringstream text;
  estimate_command({"--model", "qwen3-8b", "--gpu", "h100-sxm", "--seq-len", "8k", "--impl", "streambp"},
                   text);
  EXPECT_EQ(text.str().rfind("qwen3-8b (preset), bfloat16 (the CUDA default; --dtype to change), sft", 0), 0u)
      << text.str();
  // --train mixed needs bfloat16 weights: the CUDA default gives them.
  EXPECT_EQ(parse_estimate_request({"--model", "qwen3-8b", "--gpu", "h100-sxm", "--train", "mixed"}).in.dtype,
            torch::kBFloat16);
}

// A length whose bytes would pass int64 is refused in one line, not printed wrapped; a max-length search up
// to such lengths still answers (they fit no budget).
TEST(EstimateCalculator, ALengthPastInt64IsRefusedNotWrapped) {
  EXPECT_NE(
      one_line_error({"--model", "small", "--seq-len", "999999999999k"})
          .find("T = 1023999999998976 with N = 1 on small needs more bytes than bpbench counts exactly"),
      std::string::npos);
  EstimateInput in = parse_estimate_request({"--model", "qwen3-8b", "--seq-len", "16M"}).in;
  in.seq_len = int64_t{1} << 24;
  EXPECT_TRUE(estimate_bytes_fit_in_int64(in));  // the search's default upper, on the paper's model
  const json doc = estimate_doc({"--model", "small", "--budget", "1GB", "--upper", "999999999999k", "--impl",
                                 "streambp,plain", "--threads", "1"});
  for (const auto& impl : doc["longest"]["budgets"][0]["impls"]) {
    EXPECT_GT(impl["seq_len"].get<int64_t>(), 0) << impl;
    EXPECT_EQ(impl["bound"], "device") << impl;
  }
}

// transformers' own config classes write the files (tests/oracle/transformers_configs.py, made at build
// time): their defaults, field names and RoPE form, one per family the loader reads.
const bool transformers_configs_made_at_build_time =
    testing::made_at_build_time(&testing::transformers_configs);

TEST(EstimateCalculator, TransformersWrittenConfigsOfEachFamily) {
  const testing::PythonOutput& written = testing::transformers_configs();
  testing::require_python_output(written, "transformers' config classes");
  for (const auto& c : testing::transformers_written_families()) {
    const std::string dir = (written.dir / "write" / c.name).string();
    const json file = json::parse(file_text(dir + "/config.json"));
    EXPECT_TRUE(file.contains("transformers_version")) << "not written by transformers: " << dir;
    // The expected numbers: the same request with the config object itself.
    EstimateRequest request = parse_estimate_request(with_model("qwen3-8b"));
    request.in.config = c;
    const json expected = estimate_json(request, answer_estimate(request));
    EXPECT_EQ(numbers_of(estimate_doc(with_model(dir))), numbers_of(expected)) << c.name;
  }
}

TEST(EstimateCalculator, BadModelsAreOneLineErrorsNamingTheProblem) {
  TempDir tmp;
  const std::string missing = tmp.file("no-such-model");
  EXPECT_NE(one_line_error(with_model(missing))
                .find("unknown model '" + missing + "' (valid: a preset: tiny, small"),
            std::string::npos);
  const std::string empty_dir = tmp.sub("empty");
  EXPECT_NE(one_line_error(with_model(empty_dir)).find("cannot open config.json"), std::string::npos);
  write_text(tmp.file("broken.json"), "{\"architectures\": [");
  EXPECT_NE(one_line_error(with_model(tmp.file("broken.json"))).find("malformed JSON"), std::string::npos);

  // Dense layers below the routed ones are estimated (DeepSeek's first_k_dense_replace); above them not.
  json mixed = hf_config_json(find_model_preset("small-moe"));
  mixed["mlp_only_layers"] = {1};
  write_text(tmp.file("mixed.json"), mixed.dump());
  EXPECT_NE(
      one_line_error(with_model(tmp.file("mixed.json")))
          .find("mixes dense and mixture-of-experts layers (3 of 4 routed), whose memory the estimate does "
                "not model with dense layers above routed ones (valid: every layer dense, every layer "
                "routed, or the dense ones first in one process or data parallel"),
      std::string::npos);
  // DeepSeek's latent attention: every one-process strategy is estimated (StreamBP through the latent);
  // the sequence-parallel ones, which exchange the expanded K and V, are refused by name.
  write_text(tmp.file("latent.json"), hf_config_json(find_model_preset("tiny-deepseek")).dump());
  // (On the CPU: tiny's head dim of 10 runs CUDA's math kernel, which no estimate models.)
  EXPECT_EQ(estimate_doc(with_model(tmp.file("latent.json"), {"--seq-len", "4k,32k", "--impl", "streambp",
                                                              "--dtype", "bfloat16", "--threads", "1"}))
                .at("estimates")
                .size(),
            2u);
  // On CUDA in float32 the latent path's key blocks run the math form: every strategy but plain is refused
  // by name, and left out of the default table.
  const json float32 = estimate_doc(with_model(
      "deepseek-v2-lite", {"--seq-len", "4k", "--device", "cuda", "--dtype", "float32", "--threads", "1"}));
  ASSERT_EQ(float32.at("estimates").size(), 1u);
  EXPECT_EQ(float32["estimates"][0]["impl"], "plain");
  EXPECT_NE(one_line_error(with_model("deepseek-v2-lite", {"--seq-len", "4k", "--device", "cuda", "--dtype",
                                                           "float32", "--impl", "streambp"}))
                .find("runs its latent attention by key blocks in the math form"),
            std::string::npos);
  std::vector<std::string> ulysses = with_model(tmp.file("latent.json"));
  ulysses.insert(ulysses.end(), {"--impl", "ulysses", "--ranks", "2"});
  EXPECT_NE(
      one_line_error(ulysses).find(
          "(multi-head latent attention, DeepSeek's routing or shared experts, dense layers among routed "
          "ones) is not estimated yet: the sequence-parallel strategies' terms for it are not written"),
      std::string::npos);
  json gpt2 = hf_config_json(find_model_preset("small"));
  gpt2["architectures"] = {"GPT2LMHeadModel"};
  write_text(tmp.file("gpt2.json"), gpt2.dump());
  EXPECT_NE(one_line_error(with_model(tmp.file("gpt2.json")))
                .find("unsupported architecture [\"GPT2LMHeadModel\"] (supported: Qwen3ForCausalLM"),
            std::string::npos);
  json biased = hf_config_json(find_model_preset("llama3.1-8b"));
  biased["attention_bias"] = true;
  write_text(tmp.file("biased.json"), biased.dump());
  EXPECT_NE(
      one_line_error(with_model(tmp.file("biased.json"))).find("attention_bias = true on LlamaForCausalLM"),
      std::string::npos);
  json no_layers = hf_config_json(find_model_preset("small"));
  no_layers.erase("num_hidden_layers");
  write_text(tmp.file("no_layers.json"), no_layers.dump());
  EXPECT_NE(one_line_error(with_model(tmp.file("no_layers.json"))).find("missing \"num_hidden_layers\""),
            std::string::npos);
}

TEST(EstimateCalculator, LengthsAndSizesWithUnits) {
  EXPECT_EQ(parse_token_counts("--seq-len", "8k,32k,128k"), (std::vector<int64_t>{8192, 32768, 131072}));
  EXPECT_EQ(parse_token_count("--seq-len", "1M"), 1048576);
  EXPECT_EQ(parse_token_count("--seq-len", "1.5k"), 1536);
  EXPECT_EQ(parse_token_count("--seq-len", "4097"), 4097);
  for (const std::string bad : {"0", "-4", "1.3k", "8x", "k", "", "1..2k"})
    EXPECT_THROW(parse_token_count("--seq-len", bad), std::invalid_argument) << bad;
  EXPECT_THROW(parse_token_counts("--seq-len", "8k,"), std::invalid_argument);
  EXPECT_EQ(parse_byte_size("--budget", "80GB"), 80000000000);
  EXPECT_EQ(parse_byte_size("--budget", "80gb"), 80000000000);
  EXPECT_EQ(parse_byte_size("--budget", "1.5GiB"), 1610612736);
  EXPECT_EQ(parse_byte_size("--budget", "335544320"), 335544320);
  EXPECT_EQ(parse_byte_size("--budget", "320MiB"), 335544320);
  for (const std::string bad : {"80 GB", "80XB", "-1GB", "GB"})
    EXPECT_THROW(parse_byte_size("--budget", bad), std::invalid_argument) << bad;

  // Past int64 the FLOP counts are left out, never printed wrapped around; the memory is still estimated.
  const json long_doc = estimate_doc({"--model", "qwen3-8b", "--seq-len", "512k,16M", "--impl", "streambp",
                                      "--dtype", "bfloat16", "--device", "cuda"});
  EXPECT_GT(long_doc["estimates"][0]["flops"]["model"].get<int64_t>(), 0);
  EXPECT_TRUE(long_doc["estimates"][1]["flops"].is_null());
  EXPECT_GT(long_doc["estimates"][1]["memory"]["peak_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(schema_violation(estimate_schema(), long_doc), std::nullopt);

  std::ostringstream out;
  estimate_command({"--model", "small", "--seq-len", "1k,2k", "--impl", "streambp,plain", "--threads", "1"},
                   out);
  EXPECT_NE(out.str().find("streambp                      1024"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("plain                         2048"), std::string::npos) << out.str();
}

// The inverse against the forward estimate: what it found fits, one granularity more does not (and says which
// budget stops it), for every impl, several budgets, both devices, and offload bounded by the host.
TEST(EstimateCalculator, TheLongestLengthFitsAndOneGranularityMoreDoesNot) {
  struct Case {
    std::vector<std::string> args;
  };
  const std::vector<Case> cases = {
      {{"--model", "small", "--budget", "320MiB", "--granularity", "128", "--partition", "256",
        "--logits-partition", "256", "--threads", "1"}},
      {{"--model", "small-gemma3", "--budget", "300MB", "--granularity", "100", "--threads", "2"}},
      {{"--model", "qwen3-8b", "--gpu", "a100-80gb", "--dtype", "bfloat16"}},
      {{"--model", "llama3.1-8b", "--gpu", "h100-sxm", "--dtype", "bfloat16", "--offload", "checkpoints",
        "--host-budget", "200GB"}},
      {{"--model", "qwen3-4b", "--gpu", "h200", "--dtype", "bfloat16", "--objective", "grpo", "--batch", "1",
        "--group", "2", "--lora-rank", "8"}},
  };
  int host_bound = 0;
  for (const auto& c : cases) {
    const EstimateRequest r = parse_estimate_request(c.args);
    const EstimateAnswers a = answer_estimate(r);
    ASSERT_EQ(a.longest.size(), r.impls.size() * r.budgets.size());
    for (const auto& l : a.longest) {
      const int64_t T = l.longest.seq_len, g = r.granularity, budget = r.budgets[l.budget].bytes();
      SCOPED_TRACE(fmt::format("{} {} T={}", c.args[1], l.impl, T));
      ASSERT_GT(T, 0);
      EXPECT_EQ(T % g, 0);
      const MemoryEstimate fits = estimate_peak(input_at(r, l.impl, T));
      EXPECT_LE(fits.peak_bytes, budget);
      if (r.host_budget) {
        EXPECT_LE(fits.host_bytes, *r.host_budget);
      }
      EXPECT_EQ(fits.peak_bytes, l.longest.at.peak_bytes);
      const MemoryEstimate above = estimate_peak(input_at(r, l.impl, T + g));
      if (l.longest.bound == "device") {
        EXPECT_GT(above.peak_bytes, budget);
      } else {
        ASSERT_EQ(l.longest.bound, "host");
        ASSERT_TRUE(r.host_budget);
        EXPECT_LE(above.peak_bytes, budget);
        EXPECT_GT(above.host_bytes, *r.host_budget);
        ++host_bound;
      }
    }
  }
  EXPECT_GT(host_bound, 0);  // Llama-3.1-8B's offloaded StreamBP runs out of the 200 GB host first
}

TEST(EstimateCalculator, GpusReserveAndTheTableOfAll) {
  EXPECT_EQ(default_reserve_bytes(find_accelerator("h100-sxm").memory_bytes), 5349782323);
  EXPECT_EQ(find_accelerator("H100-SXM").memory_bytes, 85520809984);  // 81559 MiB, as nvidia-smi reports
  EstimateRequest r =
      parse_estimate_request({"--model", "qwen3-8b", "--gpu", "h100-sxm", "--dtype", "bfloat16"});
  EXPECT_EQ(r.in.device, "cuda");  // --gpu implies it
  EXPECT_EQ(r.budgets.at(0).bytes(), 85520809984 - 5349782323);
  r = parse_estimate_request(
      {"--model", "qwen3-8b", "--gpu", "h100-sxm", "--dtype", "bfloat16", "--reserve", "2GiB"});
  EXPECT_EQ(r.budgets.at(0).bytes(), 85520809984 - 2147483648);

  std::ostringstream out;
  estimate_command({"--model", "qwen3-8b", "--gpu", "all", "--dtype", "bfloat16"}, out);
  for (const auto& a : accelerators()) EXPECT_NE(out.str().find(a.label), std::string::npos) << a.label;
  EXPECT_NE(out.str().find("-: not even 1024 tokens fit"), std::string::npos) << out.str();  // 24 GB cards

  EXPECT_NE(
      one_line_error({"--model", "small", "--gpu", "h300"}).find("unknown GPU 'h300' (valid: l4, rtx-4090"),
      std::string::npos);
  EXPECT_NE(
      one_line_error({"--model", "small", "--gpu", "h200", "--budget", "1GB"}).find("valid: one of them"),
      std::string::npos);
  EXPECT_NE(
      one_line_error({"--model", "small", "--budget", "1GB", "--reserve", "1GB"}).find("valid with --gpu"),
      std::string::npos);
  EXPECT_NE(one_line_error({"--model", "small", "--gpu", "h200", "--device", "cpu"}).find("--device cuda"),
            std::string::npos);
  EXPECT_NE(one_line_error({"--model", "small"}).find("--seq-len (or a memory budget"), std::string::npos);
  EXPECT_NE(one_line_error({"--model", "small", "--gpu", "l4", "--reserve", "30GB"}).find("nothing is left"),
            std::string::npos);
}

// --ranks R: one rank's estimate of the distributed strategies (measured against Gloo runs in
// tests/run/test_per_rank_peaks.cpp); their shards shrink with R, and a sequence-parallel rank's share of the
// sequence too.
TEST(EstimateCalculator, RanksEstimateOneRankOfTheDataParallelStrategies) {
  const json two = estimate_doc({"--model", "small", "--seq-len", "2k", "--ranks", "2", "--threads", "1"});
  const json four = estimate_doc({"--model", "small", "--seq-len", "2k", "--ranks", "4", "--threads", "1"});
  ASSERT_EQ(two["estimates"].size(), 6u);
  EXPECT_EQ(two["setting"]["ranks"], 2);
  const std::vector<std::string> impls = {"streambp-dist", "checkpoint-dist", "ulysses", "streambp-ulysses",
                                          "ring",          "streambp-ring"};
  for (size_t k = 0; k < impls.size(); ++k) {
    EXPECT_EQ(two["estimates"][k]["impl"], impls[k]);
    EXPECT_LT(four["estimates"][k]["memory"]["grads_bytes"], two["estimates"][k]["memory"]["grads_bytes"]);
  }
  for (size_t k = 2; k < impls.size(); ++k)  // the rank's rows: T / R of them
    EXPECT_LT(four["estimates"][k]["memory"]["peak_bytes"], two["estimates"][k]["memory"]["peak_bytes"]);
  // 3 ranks cannot split small's 4 query heads: by default the data-parallel ones and the two rings, which
  // split no heads; Ulysses asked for, one line.
  const json three = estimate_doc({"--model", "small", "--seq-len", "2k", "--ranks", "3", "--threads", "1"});
  ASSERT_EQ(three["estimates"].size(), 4u);
  EXPECT_EQ(three["estimates"][2]["impl"], "ring");
  EXPECT_EQ(three["estimates"][3]["impl"], "streambp-ring");
  EXPECT_NE(one_line_error({"--model", "small", "--seq-len", "2k", "--ranks", "3", "--impl", "ulysses"})
                .find("3 ranks cannot split 4 query heads and 2 K/V heads"),
            std::string::npos);
  EXPECT_EQ(schema_violation(estimate_schema(), two), std::nullopt);
  EXPECT_NE(one_line_error({"--model", "small", "--seq-len", "2k", "--ranks", "2", "--impl", "streambp"})
                .find("streambp runs in one process (valid with 2 ranks: "),
            std::string::npos);
  EXPECT_NE(
      one_line_error({"--model", "small", "--seq-len", "2k", "--impl", "streambp-dist"}).find("--ranks"),
      std::string::npos);
  // The 2-D mesh: the rings by default, a strategy off the ring or a degree not dividing the ranks refused.
  const json mesh = estimate_doc(
      {"--model", "small", "--seq-len", "2k", "--ranks", "4", "--ulysses-degree", "2", "--threads", "1"});
  ASSERT_EQ(mesh["estimates"].size(), 2u);
  EXPECT_EQ(mesh["estimates"][0]["impl"], "ring");
  EXPECT_EQ(mesh["setting"]["ulysses_degree"], 2);
  EXPECT_EQ(schema_violation(estimate_schema(), mesh), std::nullopt);
  EXPECT_NE(
      one_line_error({"--model", "small", "--seq-len", "2k", "--ranks", "4", "--ulysses-degree", "2",
                      "--impl", "streambp-ulysses"})
          .find("--ulysses-degree 2 is the ring strategies' 2-D mesh (valid with it: ring, streambp-ring)"),
      std::string::npos);
  EXPECT_NE(one_line_error({"--model", "small", "--seq-len", "2k", "--ranks", "6", "--ulysses-degree", "4",
                            "--impl", "ring"})
                .find("--ulysses-degree 4 does not divide --ranks 6"),
            std::string::npos);
  EXPECT_NE(one_line_error({"--model", "small-gemma3", "--seq-len", "2k", "--ranks", "2"})
                .find("sliding-window layers is not estimated"),
            std::string::npos);
  // The ring on CUDA: flash's block pairs (bfloat16) are estimated; float32's math-form pairs are refused in
  // one line, and left out of the default list.
  const json flash = estimate_doc({"--model", "llama3.1-8b", "--seq-len", "64k", "--ranks", "8", "--device",
                                   "cuda", "--dtype", "bfloat16", "--impl", "ring"});
  ASSERT_EQ(flash["estimates"].size(), 1u);
  EXPECT_GT(flash["estimates"][0]["memory"]["peak_bytes"].get<int64_t>(), 0);
  EXPECT_NE(one_line_error({"--model", "llama3.1-8b", "--seq-len", "64k", "--ranks", "8", "--device", "cuda",
                            "--dtype", "float32", "--impl", "ring"})
                .find("ring on CUDA is estimated with flash's block pairs only"),
            std::string::npos);
  EXPECT_NE(one_line_error({"--model", "llama3.1-8b", "--seq-len", "64k", "--ranks", "8", "--device", "cuda",
                            "--dtype", "float32", "--impl", "streambp-ring"})
                .find("streambp-ring on CUDA is estimated with flash's block pairs only"),
            std::string::npos);
  for (const auto& e : estimate_doc({"--model", "llama3.1-8b", "--seq-len", "64k", "--ranks", "8", "--device",
                                     "cuda", "--dtype", "float32"})["estimates"]) {
    EXPECT_NE(e["impl"], "ring");
    EXPECT_NE(e["impl"], "streambp-ring");
  }
}

// The whole training job of one rank: --train with --ranks, --sharding zero3, the optimizer in host memory.
// ZeRO-3 holds less than ZeRO-2 on the device, the offload moves the optimizer's bytes to the host, and the
// refusals are one line.
TEST(EstimateCalculator, TheTrainingJobOfOneRankWithShardingAndTheOptimizerOffloaded) {
  const std::vector<std::string> job = {"--model", "llama3.1-8b", "--seq-len", "512k",    "--ranks",
                                        "8",       "--device",    "cuda",      "--train", "mixed"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), job.begin(), job.end());
    return estimate_doc(more);
  };
  const json zero2 = with({}), zero3 = with({"--sharding", "zero3"}),
             offloaded = with({"--sharding", "zero3", "--offload", "optimizer"});
  EXPECT_EQ(zero2["estimates"].size(), 6u);
  ASSERT_EQ(zero3["estimates"].size(), 6u);
  EXPECT_EQ(zero3["setting"]["sharding"], "zero3");
  EXPECT_EQ(offloaded["setting"]["offload"], "optimizer");
  EXPECT_EQ(schema_violation(estimate_schema(), offloaded), std::nullopt);
  for (size_t k = 0; k < 6; ++k) {
    const json &a = zero2["estimates"][k]["memory"], &b = zero3["estimates"][k]["memory"],
               &c = offloaded["estimates"][k]["memory"];
    EXPECT_EQ(zero2["estimates"][k]["impl"], zero3["estimates"][k]["impl"]);
    EXPECT_LT(b["params_bytes"].get<int64_t>(), a["params_bytes"].get<int64_t>());
    EXPECT_LT(c["peak_bytes"].get<int64_t>(), b["peak_bytes"].get<int64_t>());
    // One rank's AdamW in host memory: 4 x P_r*4 (copies, gradients, moments) and its step's temporaries.
    EXPECT_GT(c["host_bytes"].get<int64_t>(), 16 * c["grads_bytes"].get<int64_t>() / 2);
  }
  EXPECT_NE(
      one_line_error({"--model", "small", "--seq-len", "2k", "--impl", "streambp", "--sharding", "zero3"})
          .find("sharding zero3 shards the layers over ranks >= 2 (valid: "),
      std::string::npos);
  EXPECT_NE(one_line_error({"--model", "small", "--seq-len", "2k", "--offload", "optimizer"})
                .find("--offload optimizer moves a training run's AdamW tensors"),
            std::string::npos);
  EXPECT_NE(one_line_error({"--model", "small", "--seq-len", "2k", "--ranks", "2", "--sharding", "zero4"})
                .find("unknown --sharding 'zero4' (valid: none, zero1, zero2, zero3)"),
            std::string::npos);
  // none and zero1 keep whole gradients: more than zero2 on the device; zero1's optimizer is zero2's.
  const json none = with({"--sharding", "none"}), zero1 = with({"--sharding", "zero1"});
  for (size_t k = 0; k < 6; ++k) {
    const json &n = none["estimates"][k]["memory"], &one = zero1["estimates"][k]["memory"],
               &two = zero2["estimates"][k]["memory"];
    EXPECT_GT(one["grads_bytes"].get<int64_t>(), two["grads_bytes"].get<int64_t>());
    EXPECT_EQ(one["optimizer_bytes"], two["optimizer_bytes"]);
    EXPECT_GT(n["optimizer_bytes"].get<int64_t>(), one["optimizer_bytes"].get<int64_t>());
  }
}

TEST(EstimateCalculator, JsonMatchesItsSchemaAndTheText) {
  const json doc = estimate_doc({"--model", "llama3.1-8b", "--seq-len", "8k,64k", "--gpu", "all", "--dtype",
                                 "bfloat16", "--offload", "checkpoints", "--impl", "checkpoint,streambp"});
  EXPECT_EQ(schema_violation(estimate_schema(), doc), std::nullopt);
  EXPECT_EQ(doc["bpbench_estimate"], kEstimateJsonVersion);
  ASSERT_EQ(doc["estimates"].size(), 4u);
  EXPECT_EQ(doc["estimates"][1]["impl"], "streambp");
  EXPECT_EQ(doc["estimates"][1]["seq_len"], 8192);
  EXPECT_GT(doc["estimates"][1]["memory"]["host_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(doc["longest"]["budgets"].size(), accelerators().size());
  EXPECT_TRUE(doc["longest"]["host_budget_bytes"].is_null());  // --gpu: another machine's host
  // A one-length document of the same setting: the same numbers the text prints.
  std::ostringstream text;
  estimate_command({"--model", "llama3.1-8b", "--seq-len", "8k", "--gpu", "h100-sxm", "--dtype", "bfloat16",
                    "--impl", "streambp"},
                   text);
  const json one = estimate_doc({"--model", "llama3.1-8b", "--seq-len", "8k", "--gpu", "h100-sxm", "--dtype",
                                 "bfloat16", "--impl", "streambp"});
  EXPECT_NE(text.str().find(std::to_string(one["estimates"][0]["memory"]["peak_bytes"].get<int64_t>())),
            std::string::npos);
  const json& longest = one["longest"]["budgets"][0]["impls"][0];
  const std::string table = text.str().substr(text.str().find("longest sequence on"));
  const size_t row_start = table.find("\nstreambp") + 1;
  const std::string row = table.substr(row_start, table.find('\n', row_start) - row_start);
  EXPECT_NE(row.find(std::to_string(longest["seq_len"].get<int64_t>())), std::string::npos) << row;
  EXPECT_NE(row.find(std::to_string(longest["peak_bytes"].get<int64_t>())), std::string::npos) << row;
  // The schema is not a formality: a document that lost a field or changed a type is refused.
  json broken = doc;
  broken["estimates"][0]["memory"].erase("peak_bytes");
  EXPECT_NE(schema_violation(estimate_schema(), broken), std::nullopt);
  broken = doc;
  broken["longest"]["budgets"][0]["impls"][0]["bound"] = "gpu";
  EXPECT_NE(schema_violation(estimate_schema(), broken), std::nullopt);
}

bool have_matplotlib() {
  return std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
}

TEST(EstimateCalculator, PlotWritesAPngThatOpens) {
  if (!have_matplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib: --plot not checked";
  TempDir tmp;
  const std::string png = tmp.file("qwen3-8b.png");
  std::ostringstream out;
  ASSERT_EQ(estimate_command({"--model", "qwen3-8b", "--gpu", "h100-sxm", "--dtype", "bfloat16", "--seq-len",
                              "8k", "--plot", png},
                             out),
            0);
  EXPECT_NE(out.str().find("longest sequence on H100 SXM 80GB"), std::string::npos);  // the text as well
  // Opened and decoded by matplotlib itself: an image of the figure's size in pixels.
  const std::string shape = tmp.file("shape.txt");
  const std::string cmd = fmt::format(
      "/usr/bin/python3 -c \"import matplotlib.image as m; a = m.imread('{}'); print(a.shape[0], "
      "a.shape[1])\" "
      "> '{}'",
      png, shape);
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  int rows = 0, cols = 0;
  std::istringstream(file_text(shape)) >> rows >> cols;
  EXPECT_GT(rows, 300);
  EXPECT_GT(cols, 500);
  EXPECT_THROW(
      estimate_command({"--model", "small", "--seq-len", "1k", "--plot", tmp.file("no/dir/x.png")}, out),
      std::runtime_error);
}

}  // namespace
}  // namespace bpbench::test_estimate_calculator
