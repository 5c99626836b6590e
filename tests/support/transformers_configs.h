// transformers_configs.h: transformers itself on bpbench's config.json files, one Python process made at
// build time for the tests that ask it (tests/oracle/transformers_configs.py): the family configs
// transformers' own config classes write (EstimateCalculator.TransformersWrittenConfigsOfEachFamily) and the
// tiny presets it builds from bpbench's files (HfConfig.TransformersBuildsTheTinyPresetsOfEachLayerKind).
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/model/hf_model.h"
#include "harness/model/model_config.h"
#include "tests/support/test_support.h"

namespace bpbench::testing {

// One config of each family the loader reads, written by transformers' config class. Qwen2 has no preset:
// its equivalent is Qwen3-8B's dimensions with biased q, k, v projections and no q/k norm.
inline std::vector<ModelConfig> transformers_written_families() {
  ModelConfig qwen2 = find_model_preset("qwen3-8b");
  qwen2.name = "qwen2-like";
  qwen2.qk_norm = false;
  qwen2.attention_bias = true;
  return {find_model_preset("qwen3-8b"),        find_model_preset("llama3.1-8b"),
          find_model_preset("gemma3-1b"),       qwen2,
          find_model_preset("mistral-7b"),      find_model_preset("phi3-mini"),
          find_model_preset("olmo-2-7b"),       find_model_preset("olmo-3-7b"),
          find_model_preset("smollm3-3b"),      find_model_preset("gpt-oss-20b"),
          find_model_preset("glm-4.5-air"),     find_model_preset("deepseek-v3"),
          find_model_preset("deepseek-v2-lite")};
}

// The presets transformers builds from bpbench's own config.json.
inline std::vector<ModelConfig> transformers_built_presets() {
  return {find_model_preset("tiny-gemma3"),   find_model_preset("tiny-olmo3"),
          find_model_preset("tiny-smollm3"),  find_model_preset("tiny-gpt-oss"),
          find_model_preset("tiny-deepseek"), find_model_preset("tiny-glm4-moe"),
          find_model_preset("tiny-qwen3.5"),  find_model_preset("tiny-qwen3-next")};
}

// OUT/write/NAME/config.json and OUT/build/NAME/built.txt ("CLASS PARAMETERS LAYER_TYPES"), as the script's
// docstring says; `skip` where this python has no transformers.
inline const PythonOutput& transformers_configs() {
  static const PythonOutput run = [] {
    namespace fs = std::filesystem;
    nlohmann::json wanted = {{"write", nlohmann::json::object()}, {"build", nlohmann::json::object()}};
    for (const auto& c : transformers_written_families()) wanted["write"][c.name] = hf_config_json(c);
    for (const auto& c : transformers_built_presets()) wanted["build"][c.name] = hf_config_json(c);
    // The request keys the cache with the script: written whole under another name, then renamed, as the
    // shards' processes may write it at once.
    const fs::path request = fs::path(BPBENCH_BINARY_DIR) / "transformers_configs.request.json";
    const std::string partial = fmt::format("{}.{}", request.string(), ::getpid());
    std::ofstream(partial) << wanted.dump(1);
    fs::rename(partial, request);
    return cached_python_output(
        "transformers_configs",
        {fs::path(BPBENCH_SOURCE_DIR) / "tests" / "oracle" / "transformers_configs.py", request},
        fmt::format("'{}'", request.string()), "done",
        python_has_transformers()
            ? ""
            : fmt::format("{} cannot import transformers (run scripts/setup.sh): not run", BPBENCH_PYTHON));
  }();
  return run;
}

}  // namespace bpbench::testing
