// test_cli.cpp: the built bpbench binary as a user meets it: listings, help, a tiny run, and the rule that
// every bad input gets exit status 2 and exactly one stderr line naming the problem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness/model/hf_model.h"
#include "harness/model/model_config.h"
#include "harness/objectives/objective.h"
#include "harness/run/results.h"
#include "harness/run/scenario.h"
#include "impls/interface/strategy.h"
#include "tests/support/test_support.h"

namespace bpbench::test_cli {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int status = -1;
  std::string out, err;
};

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

class Cli : public ::testing::Test {
 protected:
  // `args` are shell words (the test controls them); stdout and stderr are captured separately.
  Outcome bpbench(const std::string& args) {
    const auto out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = "cd '" + dir_.string() + "' && '" BPBENCH_BINARY "' " + args + " >'" +
                            out.string() + "' 2>'" + err.string() + "' </dev/null";
    const int raw = std::system(cmd.c_str());
    Outcome o;
    o.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    o.out = testing::file_text(out);
    o.err = testing::file_text(err);
    return o;
  }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return name;
  }

  // Bad input: status 2, one stderr line with "error" and `needle`, nothing on stdout.
  void expect_bad_input(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    const Outcome o = bpbench(args);
    EXPECT_EQ(o.status, 2) << o.err;
    EXPECT_EQ(count_lines(o.err), 1u) << o.err;
    EXPECT_EQ(o.err.rfind("bpbench: error: ", 0), 0u) << o.err;
    EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("(valid: "), std::string::npos) << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
  }

  testing::TempDir tmp_;
  const fs::path dir_ = tmp_.dir();
};

TEST_F(Cli, ListModelsShowsEveryPresetWithItsParameterCount) {
  const Outcome o = bpbench("list models");
  ASSERT_EQ(o.status, 0) << o.err;
  for (const auto& m : model_presets()) {
    bool found = false;
    std::istringstream lines(o.out);
    for (std::string line; std::getline(lines, line);)
      if (line.find(" " + m.name + " ") != std::string::npos &&
          line.find(" " + std::to_string(m.parameter_count()) + " ") != std::string::npos)
        found = true;
    EXPECT_TRUE(found) << m.name << " with " << m.parameter_count() << " parameters not in:\n" << o.out;
  }
  bool qwen8b = false;
  std::istringstream lines(o.out);
  for (std::string line; std::getline(lines, line);)
    qwen8b |= line.find("qwen3-8b") != std::string::npos && line.find("8190735360") != std::string::npos;
  EXPECT_TRUE(qwen8b) << o.out;
}

TEST_F(Cli, ListImplsAndObjectives) {
  const Outcome impls = bpbench("list impls");
  ASSERT_EQ(impls.status, 0) << impls.err;
  for (const auto& name : strategy_names())
    EXPECT_NE(impls.out.find("  " + name + " "), std::string::npos) << name;
  const Outcome objectives = bpbench("list objectives");
  ASSERT_EQ(objectives.status, 0) << objectives.err;
  for (const auto& name : objective_names())
    EXPECT_NE(objectives.out.find("  " + name + " "), std::string::npos);
  const Outcome all = bpbench("list");
  ASSERT_EQ(all.status, 0);
  EXPECT_NE(all.out.find("qwen3-8b"), std::string::npos);
  EXPECT_NE(all.out.find("streambp"), std::string::npos);
  EXPECT_NE(all.out.find("grpo"), std::string::npos);
}

// The lists the docs and help texts quote (tests/docs/doc_commands.py): each from its registry, in its order.
TEST_F(Cli, ListNamesAreTheRegistriesInOrder) {
  auto joined = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s + "\n";
  };
  std::vector<std::string> labels, models;
  for (const auto& f : hf_family_names()) labels.push_back(f.label);
  for (const auto& m : model_presets()) models.push_back(m.name);
  EXPECT_EQ(bpbench("list families --names").out, joined(labels));
  EXPECT_EQ(bpbench("list models --names").out, joined(models));
  EXPECT_EQ(bpbench("list impls --names").out, joined(strategy_names()));
  EXPECT_EQ(bpbench("list objectives --names").out, joined(objective_names()));
  EXPECT_EQ(bpbench("list grid --names").out, joined(grid_keys()));
  EXPECT_EQ(bpbench("list impls --names --distributed").out,
            "streambp-dist, checkpoint-dist, ulysses, streambp-ulysses, ring, streambp-ring\n");
  const Outcome families = bpbench("list families");
  for (const auto& f : hf_family_names())
    EXPECT_NE(families.out.find(f.architecture + " "), std::string::npos) << f.label;
  EXPECT_NE(bpbench("list gpus").out.find("h100-sxm     H100 SXM 80GB"), std::string::npos);
  for (const char* bad :
       {"list --names", "list models --distributed", "list models --frob", "list nothing"}) {
    const Outcome o = bpbench(bad);
    EXPECT_EQ(o.status, 2) << bad;
    EXPECT_EQ(o.err.rfind("bpbench: error: list: ", 0), 0u) << bad << ": " << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
}

TEST_F(Cli, HelpForEveryCommandExitsZero) {
  for (const char* args :
       {"--help", "-h", "help", "run --help", "help run", "list --help", "help list", "--version"}) {
    const Outcome o = bpbench(args);
    EXPECT_EQ(o.status, 0) << args << ": " << o.err;
    EXPECT_FALSE(o.out.empty()) << args;
    EXPECT_TRUE(o.err.empty()) << args << ": " << o.err;
  }
  EXPECT_NE(bpbench("run --help").out.find("usage: bpbench run SCENARIO.json"), std::string::npos);
  EXPECT_NE(bpbench("list --help").out.find("usage: bpbench list"), std::string::npos);
  EXPECT_EQ(bpbench("--help").out.find("run-cell"), std::string::npos) << "run-cell is internal";
}

// What a bug report needs first: the commit built and the LibTorch and CUDA it was built with.
TEST_F(Cli, VersionNamesTheCommitLibTorchAndCuda) {
  const Outcome o = bpbench("--version");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out.rfind(fmt::format("bpbench {}\n", kBpbenchVersion), 0), 0u) << o.out;
  EXPECT_NE(o.out.find(fmt::format("\nLibTorch: {}\n", TORCH_VERSION)), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\nCUDA: "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\ncompiler: "), std::string::npos) << o.out;
  const auto at = o.out.find("\ncommit: ");
  ASSERT_NE(at, std::string::npos) << o.out;
  const std::string commit = o.out.substr(at + 9, 40);
  EXPECT_EQ(commit.find_first_not_of("0123456789abcdef"), std::string::npos) << "not a commit: " << o.out;
}

TEST_F(Cli, BadInputIsOneLineAndExitStatus2) {
  expect_bad_input(
      "run " + write("m.json", R"({"grid": {"model": "gpt5", "impl": "plain", "seq_len": 16}})") + " --out o",
      "gpt5");
  expect_bad_input(
      "run " +
          write("i.json", R"({"grid": {"model": "tiny", "impl": ["plain", "magicbp"], "seq_len": 16}})") +
          " --out o",
      "magicbp");
  expect_bad_input(
      "run " +
          write("o.json",
                R"({"grid": {"model": "tiny", "impl": "plain", "objective": "ppo", "seq_len": 16}})") +
          " --out o",
      "ppo");
  expect_bad_input(
      "run " + write("s.json", R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 0}})") + " --out o",
      "seq_len");
  expect_bad_input(
      "run " +
          write("p.json", R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 8, "partition": 0}})") +
          " --out o",
      "partition");
  expect_bad_input(
      "run " +
          write("d.json", R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 8, "dtype": "int8"}})") +
          " --out o",
      "int8");
  expect_bad_input(
      "run " + write("k.json", R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 8, "colour": 1}})") +
          " --out o",
      "colour");
  expect_bad_input(
      "run " + write("bad.json", "{\"grid\": {\"model\": \"tiny\",\n  \"impl\": }\n") + " --out o",
      "malformed JSON");
  expect_bad_input("run no-such-scenario.json --out o", "no-such-scenario.json");
  expect_bad_input("frobnicate", "frobnicate");
  expect_bad_input("", "missing command");
  expect_bad_input("list widgets", "widgets");
  expect_bad_input("run --bogus", "--bogus");
  expect_bad_input("run", "SCENARIO.json");
  expect_bad_input("run " +
                       write("ok.json", R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 8}})") +
                       " --threads zero",
                   "zero");
  EXPECT_FALSE(fs::exists(dir_ / "o")) << "bad input must be rejected before anything is written";
}

// A model directory whose config.json asks for what bpbench does not model is refused by the field's name
// before anything runs, never loaded as another model.
TEST_F(Cli, ModelDirectoriesWithUnmodelledFieldsAreRefusedByName) {
  auto scenario_for = [&](const std::string& name, const std::string& architecture,
                          const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json config = testing::hf_config(find_model_preset("tiny"), architecture);
    edit(config);
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "config.json") << config.dump(2);
    return write(name + ".json", R"({"grid": {"model": ")" + name + R"(", "impl": "plain", "seq_len": 8}})");
  };
  expect_bad_input("run " +
                       scenario_for("llama-su", "LlamaForCausalLM",
                                    [](nlohmann::json& c) {
                                      c["rope_scaling"] = {{"rope_type", "su"},
                                                           {"short_factor", {1.0, 1.0, 1.0}},
                                                           {"long_factor", {1.0, 1.0, 1.0}},
                                                           {"original_max_position_embeddings", 4096}};
                                    }) +
                       " --out o",
                   "\"rope_scaling\".rope_type 'su' is not supported");
  expect_bad_input("run " +
                       scenario_for("qwen2-sliding", "Qwen2ForCausalLM",
                                    [](nlohmann::json& c) {
                                      c["use_sliding_window"] = true;
                                      c["sliding_window"] = 4096;
                                    }) +
                       " --out o",
                   "\"use_sliding_window\" true is not supported");
  EXPECT_FALSE(fs::exists(dir_ / "o"));
}

TEST_F(Cli, RunWritesResultsProgressAndTable) {
  write("t.json",
        R"({"name": "cli-tiny", "grid": {"model": "tiny", "impl": ["plain", "streambp"], "seq_len": 16,
    "partition": 4}, "measure": {"time": {"warmup": 0, "repeat": 1}}})");
  const Outcome o = bpbench("run t.json --out res --threads 1");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("[1/2] model=tiny impl=plain objective=sft seq_len=16 ... ok "), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("[2/2] model=tiny impl=streambp"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("ETA"), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("| model | impl "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("grad rel L2"), std::string::npos) << o.out;
  const auto results = nlohmann::json::parse(testing::file_text(dir_ / "res" / "results.json"));
  EXPECT_EQ(results.at("schema"), "bpbench.results/1");
  ASSERT_EQ(results.at("cells").size(), 2u);
  EXPECT_EQ(results.at("meta").at("argv")[1], "run");
  EXPECT_EQ(results.at("meta").at("threads"), 1);
  for (const auto& c : results.at("cells")) EXPECT_EQ(c.at("status"), "ok") << c.dump();
}

// A results.json is never written over by a run that did not start it: a second run into the same folder
// refuses in one line (pointing at --resume and --force) and leaves the file as it was; --force moves it
// aside, byte for byte, and writes the new one.
TEST_F(Cli, ASecondRunNeverOverwritesResultsUnlessForcedAndThenKeepsThem) {
  write("t.json", R"({"name": "cli-twice", "grid": {"model": "tiny", "impl": "plain", "seq_len": 8},
    "measure": {"time": false, "grad_error": false}})");
  ASSERT_EQ(bpbench("run t.json --out res --threads 1 --quiet").status, 0);
  const std::string first = testing::file_text(dir_ / "res" / "results.json");

  expect_bad_input("run t.json --out res --threads 1", "already holds results");
  const Outcome refused = bpbench("run t.json --out res --threads 1");
  EXPECT_NE(refused.err.find("--resume"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--force"), std::string::npos) << refused.err;
  EXPECT_EQ(testing::file_text(dir_ / "res" / "results.json"), first);
  expect_bad_input("run t.json --out res --force --resume", "exclude each other");

  const Outcome forced = bpbench("run t.json --out res --threads 1 --force");
  ASSERT_EQ(forced.status, 0) << forced.err;
  std::vector<fs::path> aside;
  for (const auto& entry : fs::directory_iterator(dir_ / "res"))
    if (entry.path().filename().string().rfind("results.replaced-", 0) == 0) aside.push_back(entry.path());
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(testing::file_text(aside[0]), first);
  EXPECT_NE(forced.err.find(aside[0].filename().string()), std::string::npos) << forced.err;
  const auto results = nlohmann::json::parse(testing::file_text(dir_ / "res" / "results.json"));
  EXPECT_NE(results.at("meta").at("argv").dump().find("--force"), std::string::npos);
  EXPECT_EQ(bpbench("run t.json --out res --threads 1 --resume --quiet").status, 0);
}

// A folder another run is writing into is refused at once, naming that run's pid; its lock goes with its
// process, so the folder is free again afterwards. The other run here is this test's process holding the
// lock.
TEST_F(Cli, ARunIntoAFolderInUseRefusesAtOnce) {
  write("t.json", R"({"name": "cli-busy", "grid": {"model": "tiny", "impl": "plain", "seq_len": 8},
    "measure": {"time": false, "grad_error": false}})");
  fs::create_directories(dir_ / "busy");
  const std::string lock = (dir_ / "busy" / ".bpbench.lock").string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string pid = std::to_string(::getpid());
  ASSERT_EQ(::write(fd, pid.data(), pid.size()), static_cast<ssize_t>(pid.size()));
  expect_bad_input("run t.json --out busy --threads 1", "in use by another bpbench run (pid " + pid);
  expect_bad_input("run t.json --out busy --threads 1 --resume", "in use by another bpbench run");
  EXPECT_FALSE(fs::exists(dir_ / "busy" / "results.json"));
  ::close(fd);
  EXPECT_EQ(bpbench("run t.json --out busy --threads 1 --quiet").status, 0);
  EXPECT_TRUE(fs::exists(dir_ / "busy" / "results.json"));
}

}  // namespace
}  // namespace bpbench::test_cli
