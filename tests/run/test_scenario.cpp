// test_scenario.cpp: the scenario parser: scalar-or-list values, expansion count and order, defaults, and one
// error per kind of bad input whose message names the offending key or value and lists the valid choices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "harness/run/scenario.h"
#include "tests/support/test_support.h"

namespace bpbench::test_scenario {
namespace {

Scenario parse(const std::string& text) {
  return parse_scenario_text(text, "test.json");
}

// A valid scenario with `grid_extra` spliced into the grid and `top_extra` into the top level.
std::string scenario_text(const std::string& grid_extra = "", const std::string& top_extra = "") {
  return R"({"name": "t", )" + top_extra + R"("grid": {"model": "tiny", "impl": "plain", "seq_len": 32)" +
         (grid_extra.empty() ? "" : ", " + grid_extra) + "}}";
}

// The parse must fail with an InputError: one line, "(valid: ...)", and every fragment present.
void expect_input_error(const std::string& text, const std::vector<std::string>& fragments) {
  try {
    parse(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(valid: "), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << text << ": " << e.what();
  }
}

const GridAxis& axis(const Scenario& s, const std::string& key) {
  for (const auto& a : s.grid)
    if (a.key == key) return a;
  throw std::runtime_error("no axis " + key);
}

TEST(Scenario, GridValuesMayBeScalarsOrLists) {
  auto s = parse(
      R"({"grid": {"model": "tiny", "impl": ["plain", "streambp"], "seq_len": 64, "dtype": ["float64"]}})");
  EXPECT_EQ(axis(s, "model").values.size(), 1u);
  EXPECT_EQ(axis(s, "impl").values.size(), 2u);
  EXPECT_EQ(axis(s, "seq_len").values.size(), 1u);
  ASSERT_EQ(s.cell_count(), 2u);
  auto cells = s.expand();
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(cells[0].impl, "plain");
  EXPECT_EQ(cells[1].impl, "streambp");
  for (const auto& c : cells) {
    EXPECT_EQ(c.model, "tiny");
    EXPECT_EQ(c.seq_len, 64);
    EXPECT_EQ(c.dtype, "float64");
  }
  EXPECT_EQ(s.varying_keys(), std::vector<std::string>{"impl"});
}

TEST(Scenario, ExpansionIsTheCartesianProductInKeyTableOrder) {
  auto s = parse(R"({"grid": {"impl": ["plain", "checkpoint", "streambp"], "model": ["tiny", "small"],
                              "seq_len": [32, 64], "objective": ["sft", "dpo"]}})");
  const auto cells = s.expand();
  ASSERT_EQ(cells.size(), 3u * 2u * 2u * 2u);
  ASSERT_EQ(s.cell_count(), cells.size());
  // Key-table order is model, objective, dtype, batch, seq_len, impl, ...: impl varies fastest, model
  // slowest, whatever order the file lists the keys in.
  auto key = [](const Cell& c) {
    return c.model + "/" + c.objective + "/" + std::to_string(c.seq_len) + "/" + c.impl;
  };
  EXPECT_EQ(key(cells[0]), "tiny/sft/32/plain");
  EXPECT_EQ(key(cells[1]), "tiny/sft/32/checkpoint");
  EXPECT_EQ(key(cells[2]), "tiny/sft/32/streambp");
  EXPECT_EQ(key(cells[3]), "tiny/sft/64/plain");
  EXPECT_EQ(key(cells[6]), "tiny/dpo/32/plain");
  EXPECT_EQ(key(cells[12]), "small/sft/32/plain");
  EXPECT_EQ(key(cells[23]), "small/dpo/64/streambp");
  std::set<std::string> distinct;
  for (const auto& c : cells) distinct.insert(key(c));
  EXPECT_EQ(distinct.size(), cells.size());
  EXPECT_EQ(grid_keys().front(), "model");
  EXPECT_EQ(grid_keys().size(), 18u);  // offload the 16th, ulysses_degree the 17th, sharding the 18th
}

TEST(Scenario, DefaultsFillEveryKey) {
  auto s = parse(R"({"grid": {"model": "tiny", "impl": "streambp", "seq_len": [40, 64]}})");
  EXPECT_EQ(s.name, "scenario");
  EXPECT_EQ(s.settings.device, "cpu");
  EXPECT_EQ(s.settings.seed, 0u);
  EXPECT_EQ(s.settings.threads, 0);  // all cores, resolved by the runner
  EXPECT_FALSE(s.isolate);
  EXPECT_TRUE(s.settings.measure.memory);
  EXPECT_FALSE(s.settings.measure.budget_bytes.has_value());
  EXPECT_TRUE(s.settings.measure.time.enabled);
  EXPECT_EQ(s.settings.measure.time.warmup, 1);
  EXPECT_EQ(s.settings.measure.time.repeat, 3);
  EXPECT_EQ(s.settings.measure.grad_error_reference, "float64");
  EXPECT_FALSE(s.settings.measure.timeline);
  for (const auto& a : s.grid)
    EXPECT_EQ(a.given, a.key == "model" || a.key == "impl" || a.key == "seq_len") << a.key;

  const auto cells = s.expand();
  ASSERT_EQ(cells.size(), 2u);
  for (const auto& c : cells) {
    EXPECT_EQ(c.objective, "sft");
    EXPECT_EQ(c.dtype, "float32");
    EXPECT_EQ(c.batch, 1);
    EXPECT_EQ(c.partition, c.seq_len);  // absent partitions are one chunk
    EXPECT_EQ(c.logits_partition, c.seq_len);
    EXPECT_EQ(c.lora_rank, 0);
    EXPECT_DOUBLE_EQ(c.lora_alpha, 64);
    EXPECT_EQ(c.group, 8);
    EXPECT_EQ(c.prompt_len, -1);
    EXPECT_FALSE(c.padding);
    EXPECT_DOUBLE_EQ(c.beta, 0.1);
    EXPECT_DOUBLE_EQ(c.epsilon, 0.2);
    EXPECT_EQ(c.offload, "none");
    EXPECT_EQ(c.ulysses_degree, 1);
    EXPECT_EQ(c.sharding, "zero2");
  }
  EXPECT_EQ(cells[0].partition, 40);
  EXPECT_EQ(cells[1].partition, 64);
}

TEST(Scenario, EveryKeyIsAccepted) {
  auto s =
      parse(R"({"name": "all", "description": "d", "device": "cpu", "seed": 5, "threads": 2, "isolate": true,
    "rope": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768},
    // comments are allowed in scenario files
    "grid": {"model": "tiny", "impl": "mst", "objective": "grpo", "seq_len": 1e2, "batch": 2, "dtype": "bfloat16",
             "partition": 1000, "logits_partition": [1, null], "lora_rank": 4, "lora_alpha": 8, "group": 3,
             "prompt_len": 10, "padding": true, "beta": 0, "epsilon": 0.1, "offload": "checkpoints",
             "ulysses_degree": 1, "sharding": "zero3"},
    "measure": {"memory": false, "budget_bytes": 12345, "time": false, "grad_error": false, "timeline": true}})");
  EXPECT_EQ(s.name, "all");
  EXPECT_EQ(s.settings.seed, 5u);
  EXPECT_EQ(s.settings.threads, 2);
  EXPECT_TRUE(s.isolate);
  EXPECT_EQ(s.settings.rope.at("rope_type"), "yarn");
  EXPECT_FALSE(s.settings.measure.memory);
  EXPECT_EQ(s.settings.measure.budget_bytes.value_or(-1), 12345);
  EXPECT_FALSE(s.settings.measure.time.enabled);
  EXPECT_TRUE(s.settings.measure.grad_error_reference.empty());
  EXPECT_TRUE(s.settings.measure.timeline);
  const auto cells = s.expand();
  ASSERT_EQ(cells.size(), 2u);
  const Cell& c = cells[0];
  EXPECT_EQ(c.seq_len, 100);
  EXPECT_EQ(c.partition, 1000);  // larger than seq_len is valid: one chunk
  EXPECT_EQ(c.logits_partition, 1);
  EXPECT_EQ(cells[1].logits_partition, 100);  // null: seq_len
  EXPECT_EQ(c.lora_rank, 4);
  EXPECT_EQ(c.group, 3);
  EXPECT_TRUE(c.padding);
  EXPECT_DOUBLE_EQ(c.beta, 0.0);
  EXPECT_EQ(c.offload, "checkpoints");
  EXPECT_EQ(c.sharding, "zero3");

  // Axes and measure round-trip through JSON: that is how an isolated cell travels to its child process.
  const Cell back = Cell::from_axes(c.axes());
  EXPECT_EQ(back.axes(), c.axes());
  EXPECT_EQ(MeasureSpec::from_json(s.settings.measure.to_json()).to_json(), s.settings.measure.to_json());
  for (const auto& key : grid_keys()) EXPECT_TRUE(c.axes().contains(key)) << key;
}

TEST(Scenario, DeviceActivityOnACudaTimeline) {
  const auto s = parse(R"({"device": "cuda", "grid": {"model": "tiny", "impl": "plain", "seq_len": 32},
                           "measure": {"timeline": true, "device_activity": true}})");
  EXPECT_TRUE(s.settings.measure.device_activity);
  EXPECT_TRUE(MeasureSpec::from_json(s.settings.measure.to_json()).device_activity);  // travels to a child
  EXPECT_FALSE(parse(scenario_text("")).settings.measure.device_activity);            // off by default
}

TEST(Scenario, CppStacksOnATimeline) {
  const auto s = parse(R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 32},
                           "measure": {"timeline": true, "cpp_stacks": true}})");
  EXPECT_TRUE(s.settings.measure.cpp_stacks);
  EXPECT_TRUE(MeasureSpec::from_json(s.settings.measure.to_json()).cpp_stacks);  // travels to a child
  EXPECT_FALSE(parse(scenario_text("")).settings.measure.cpp_stacks);            // off by default
}

TEST(Scenario, RmsNormKernelChoice) {
  EXPECT_EQ(parse(scenario_text("", R"("rms_norm": "hf", )")).settings.rms_norm, "hf");
  EXPECT_EQ(parse(scenario_text("")).settings.rms_norm, "");  // the device's default
}

TEST(Scenario, MeasureTimeObject) {
  auto s = parse(scenario_text(
      "", R"("measure": {"time": {"warmup": 0, "repeat": 5}, "grad_error": {"reference": "float64"}}, )"));
  EXPECT_TRUE(s.settings.measure.time.enabled);
  EXPECT_EQ(s.settings.measure.time.warmup, 0);
  EXPECT_EQ(s.settings.measure.time.repeat, 5);
  EXPECT_EQ(s.settings.measure.grad_error_reference, "float64");
}

TEST(Scenario, ErrorsNameTheProblemAndTheValidChoices) {
  expect_input_error(scenario_text("", R"("nmae": "x", )"),
                     {"unknown scenario key 'nmae'", "grid", "measure"});
  expect_input_error(scenario_text(R"("seqlen": 3)"),
                     {"unknown grid key 'seqlen'", "seq_len", "logits_partition"});
  expect_input_error(scenario_text("", R"("measure": {"memroy": true}, )"),
                     {"unknown measure key 'memroy'", "memory", "budget_bytes", "timeline"});
  expect_input_error(scenario_text("", R"("measure": {"time": {"repeats": 2}}, )"), {"repeats", "repeat"});
  expect_input_error(R"({"grid": {"model": "tinyy", "impl": "plain", "seq_len": 32}})",
                     {"grid.model", "unknown model 'tinyy'", "tiny", "qwen3-8b"});
  expect_input_error(R"({"grid": {"model": "tiny", "impl": ["plain", "streamb"], "seq_len": 32}})",
                     {"grid.impl[1]", "unknown impl 'streamb'", "streambp", "checkpoint"});
  expect_input_error(scenario_text(R"("objective": "ppo")"),
                     {"unknown objective 'ppo'", "sft", "dpo", "grpo"});
  expect_input_error(R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 0}})",
                     {"grid.seq_len", "0", ">= 2"});
  expect_input_error(R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": [64, 1]}})",
                     {"grid.seq_len[1]", "1", ">= 2"});
  expect_input_error(scenario_text(R"("partition": 0)"), {"grid.partition", "0", ">= 1"});
  expect_input_error(scenario_text(R"("logits_partition": [8, -3])"),
                     {"grid.logits_partition[1]", "-3", ">= 1"});
  expect_input_error(scenario_text(R"("batch": 0)"), {"grid.batch", ">= 1"});
  expect_input_error(scenario_text(R"("dtype": "float16")"),
                     {"unknown dtype 'float16'", "float32", "bfloat16", "float64"});
  expect_input_error(R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 32)",
                     {"malformed JSON", "test.json", "line"});
  expect_input_error("", {"malformed JSON"});
  expect_input_error("[1, 2]", {"expected a JSON object", "grid"});
  expect_input_error(R"({"name": "x"})", {"missing key 'grid'", "seq_len"});
  expect_input_error(R"({"grid": {"impl": "plain", "seq_len": 32}})", {"missing key 'model'", "tiny"});
  expect_input_error(R"({"grid": {"model": "tiny", "impl": [], "seq_len": 32}})",
                     {"grid.impl", "empty", "plain"});
  expect_input_error(R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": "long"}})",
                     {"grid.seq_len", "expected an integer", "\"long\""});
  expect_input_error(R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 32.5}})",
                     {"grid.seq_len", "32.5"});
  expect_input_error(scenario_text(R"("padding": "yes")"), {"grid.padding", "true, false"});
  expect_input_error(scenario_text(R"("offload": ["none", "activations"])"),
                     {"grid.offload[1]", "unknown offload 'activations'", "none, checkpoints, optimizer"});
  expect_input_error(scenario_text("", R"("device": "tpu", )"), {"unknown device 'tpu'", "cpu, cuda"});
  expect_input_error(scenario_text("", R"("rms_norm": "apex", )"), {"rms_norm", "'apex'", "hf, fused"});
  // CUPTI traces a CUDA step into its timeline's trace: without either there is nothing to put it in.
  expect_input_error(scenario_text("", R"("measure": {"timeline": true, "device_activity": true}, )"),
                     {"measure.device_activity", "device cuda with measure.timeline true"});
  expect_input_error(scenario_text("", R"("device": "cuda", "measure": {"device_activity": true}, )"),
                     {"measure.device_activity", "device cuda with measure.timeline true"});
  // The stacks go into the timeline's memory_viz pickle: without a timeline there is none.
  expect_input_error(scenario_text("", R"("measure": {"cpp_stacks": true}, )"),
                     {"measure.cpp_stacks", "measure.timeline true"});
  expect_input_error(scenario_text("", R"("measure": {"timeline": true, "cpp_stacks": 1}, )"),
                     {"measure.cpp_stacks", "true, false"});
  expect_input_error(scenario_text("", R"("threads": 0, )"), {"threads", ">= 1"});
  expect_input_error(scenario_text("", R"("measure": {"grad_error": {"reference": "float32"}}, )"),
                     {"float32", "float64"});
  expect_input_error(scenario_text("", R"("measure": {"time": {"repeat": -1}}, )"),
                     {"measure.time.repeat", ">= 0"});
  expect_input_error(
      scenario_text("", R"("rope": {"rope_type": "su", "factor": 4}, )"),
      {"rope.rope_type 'su' is not supported", "default, linear, dynamic, yarn, llama3, longrope"});
  expect_input_error(scenario_text("", R"("rope": {"rope_type": "yarn", "factr": 4}, )"),
                     {"rope.factr is not a field of rope_type 'yarn'", "rope_parameters"});
  expect_input_error(scenario_text("", R"("rope": "yarn", )"), {"rope must be an object", "rope_type"});
  // The 2-D mesh's Ulysses groups split the ranks: U divides world_size.
  expect_input_error(
      scenario_text(R"("ulysses_degree": [2, 3])", R"("world_size": 4, )"),
      {"grid.ulysses_degree: 3 does not divide world_size 4", "divisors of world_size: 1, 2, 4"});
  expect_input_error(scenario_text(R"("ulysses_degree": 0)"), {"grid.ulysses_degree", ">= 1"});
  // An unknown stage: refused, every stage named.
  expect_input_error(scenario_text(R"("sharding": ["zero2", "zero4"])"),
                     {"grid.sharding[1]", "none, zero1, zero2, zero3"});
}

// Results written before the offload, ulysses_degree and sharding axes existed still read, as offload "none",
// ulysses_degree 1 and sharding zero2; other keys stay required.
TEST(Scenario, AxesFromOlderResultsWithoutOffload) {
  nlohmann::json axes =
      parse(R"({"grid": {"model": "tiny", "impl": "streambp", "seq_len": 40}})").expand()[0].axes();
  axes.erase("offload");
  axes.erase("ulysses_degree");
  axes.erase("sharding");
  EXPECT_EQ(Cell::from_axes(axes).offload, "none");
  EXPECT_EQ(Cell::from_axes(axes).ulysses_degree, 1);
  EXPECT_EQ(Cell::from_axes(axes).sharding, "zero2");
  axes.erase("lora_rank");
  try {
    Cell::from_axes(axes);
    FAIL() << "axes without lora_rank were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing key 'lora_rank'"), std::string::npos) << e.what();
  }
}

TEST(Scenario, MissingFileIsAnInputError) {
  try {
    load_scenario("/nonexistent/bpbench-scenario.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/bpbench-scenario.json"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(valid: "), std::string::npos) << e.what();
  }
}

// A relative data path is the scenario file's, whatever the working directory.
TEST(Scenario, RelativeDataPathIsTheScenarioFiles) {
  testing::TempDir tmp;
  const std::string dir = tmp.sub("scenarios");
  std::ofstream(dir + "/tokens.json") << "[[1, 2, 3], [4, 5]]";
  std::ofstream(dir + "/s.json")
      << R"({"data": "tokens.json", "grid": {"model": "tiny", "impl": "plain", "seq_len": 4}})";
  const Scenario s = load_scenario(dir + "/s.json");
  EXPECT_EQ(s.settings.data_path, dir + "/tokens.json");
  std::ofstream(dir + "/missing.json")
      << R"({"data": "none.json", "grid": {"model": "tiny", "impl": "plain", "seq_len": 4}})";
  try {
    load_scenario(dir + "/missing.json");
    ADD_FAILURE() << "accepted a missing data file";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(dir + "/none.json': no such file"));
  }
}

// Every scenario shipped, in scenarios/ and its folders (gpu_check/: scripts/gpu/check.sh's).
TEST(Scenario, ShippedScenariosParse) {
  int files = 0, in_folders = 0;
  const std::filesystem::path root = std::string(BPBENCH_SOURCE_DIR) + "/scenarios";
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".json") continue;
    if (entry.path().filename() == "scenario.schema.json") continue;  // the schema, not a scenario
    ++files;
    SCOPED_TRACE(entry.path().string());
    if (const auto text = nlohmann::json::parse(std::ifstream(entry.path()), nullptr, true, true);
        text.contains("data") &&
        !std::filesystem::exists(entry.path().parent_path() / text.at("data").get<std::string>())) {
      // Real text made by scripts/text_data.py (scripts/setup.sh makes it; a GPU machine without the network
      // gets it carried): without it, the one-line error says where the file comes from.
      try {
        load_scenario(entry.path().string());
        ADD_FAILURE() << "accepted a missing data file";
      } catch (const InputError& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("scripts/text_data.py"));
      }
      continue;
    }
    const auto s = load_scenario(entry.path().string());
    // Results land in out/<name>: the file's own name, prefixed by its folder's where it has one.
    const std::filesystem::path folder = entry.path().parent_path().lexically_relative(root);
    const bool nested = folder != ".";
    in_folders += nested ? 1 : 0;
    EXPECT_EQ(s.name, (nested ? folder.string() + "_" : std::string()) + entry.path().stem().string());
    EXPECT_GE(s.cell_count(), 1u);
    if (s.settings.device != "cuda") continue;
    // A GPU scenario states its budget (the device's memory less a reserve, said in its description), so a
    // result never depends on which GPU happened to run it.
    const auto& m = s.settings.measure;
    EXPECT_TRUE(m.max_seq_len ? m.max_seq_len->budget_bytes.has_value() : m.budget_bytes.has_value());
    EXPECT_NE(s.description.find("budget"), std::string::npos);
  }
  EXPECT_GE(files, 10);
  EXPECT_GE(in_folders, 4);  // gpu_check/'s four
}

}  // namespace
}  // namespace bpbench::test_scenario
