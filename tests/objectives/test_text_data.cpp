// test_text_data.cpp: scripts/text_data.py, the real-text token file of the training scenarios, on a small
// corpus of its own: the same corpus gives the same bytes (the BPE's training is deterministic), the file is
// what bpbench's data reader takes (sequences of exactly T ids below V, documents joined by id 0), its
// manifest states what it holds, a training run reads it and records its SHA-256, and the output folder
// (carried whole to GPU machines) holds those files and no download.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_text_data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string python_with_tokenizers() {
  const std::string python = BPBENCH_PYTHON;
  if (std::system(fmt::format("'{}' -c 'import tokenizers' >/dev/null 2>&1", python).c_str()) != 0) return "";
  return python;
}

// Runs text_data.py on `sources`; returns its exit status, its output in `log`.
int text_data(const std::string& python, const std::string& args, const std::string& log) {
  const fs::path script = fs::path(BPBENCH_SOURCE_DIR) / "scripts" / "text_data.py";
  return std::system(fmt::format("'{}' '{}' {} >'{}' 2>&1", python, script.string(), args, log).c_str());
}

// A few documents of plain English, some repeated, in two directories as the package's sources are.
void write_corpus(const TempDir& tmp) {
  const std::string prose =
      "The tutorial introduces the reader informally to the basic concepts and features of the language "
      "and system. It helps to have an interpreter handy for hands-on experience, but all examples are "
      "self-contained, so the tutorial can be read off-line as well.\n";
  std::ofstream(tmp.sub("src/tutorial") + "/intro.rst.txt") << prose << prose;
  std::ofstream(tmp.sub("src/tutorial") + "/errors.rst.txt")
      << "Errors detected during execution are called exceptions and are not unconditionally fatal.\n"
      << prose;
  std::ofstream(tmp.sub("src/faq") + "/general.rst.txt")
      << "Python is an interpreted, interactive, object-oriented programming language.\n"
      << prose << "It has interfaces to many system calls and libraries.\n";
}

TEST(TextData, SameCorpusSameBytesAndABpbenchReadableFile) {
  const std::string python = python_with_tokenizers();
  if (python.empty()) GTEST_SKIP() << BPBENCH_PYTHON << " cannot import tokenizers (run scripts/setup.sh)";
  TempDir tmp;
  write_corpus(tmp);
  const std::string args = fmt::format("--sources '{}' --vocab 300 --seq-len 16", tmp.file("src"));
  ASSERT_EQ(text_data(python, args + fmt::format(" --out '{}'", tmp.file("a")), tmp.file("log")), 0)
      << file_text(tmp.file("log"));
  ASSERT_EQ(text_data(python, args + fmt::format(" --out '{}'", tmp.file("b")), tmp.file("log")), 0)
      << file_text(tmp.file("log"));
  const std::string data = tmp.file("a/python_docs_V300_T16.json");
  // The path first (stdout), then the folder's size (stderr).
  EXPECT_THAT(file_text(tmp.file("log")),
              ::testing::StartsWith(tmp.file("b/python_docs_V300_T16.json") + "\n"));
  EXPECT_THAT(file_text(tmp.file("log")), ::testing::HasSubstr(" MiB; carry it whole to a GPU machine"));
  EXPECT_EQ(file_text(data), file_text(tmp.file("b/python_docs_V300_T16.json")));

  const json sequences = json::parse(file_text(data));
  const json manifest = json::parse(file_text(tmp.file("a/python_docs_V300_T16.manifest.json")));
  ASSERT_GE(sequences.size(), 4u);
  EXPECT_EQ(manifest.at("sequences"), sequences.size());
  EXPECT_EQ(manifest.at("files"), 3);
  EXPECT_EQ(manifest.at("eos_id"), 0);
  EXPECT_LE(manifest.at("vocab").get<int64_t>(), 300);
  int64_t separators = 0;
  for (const auto& s : sequences) {
    ASSERT_EQ(s.size(), 16u);
    for (const auto& id : s) {
      EXPECT_GE(id.get<int64_t>(), 0);
      EXPECT_LT(id.get<int64_t>(), 300);
      separators += id.get<int64_t>() == 0;
    }
  }
  // Three documents, three <|endoftext|> after them; the last may fall in the dropped partial sequence.
  EXPECT_GE(separators, 2);
  EXPECT_LE(separators, 3);

  // bpbench trains on it: the cell records the file and its SHA-256, as the manifest states it.
  RunOptions opt;
  opt.out_dir = tmp.sub("out");
  opt.self_exe = BPBENCH_BINARY;
  opt.argv = {"test_text_data"};
  const Scenario s = parse_scenario_text(fmt::format(R"({{"name": "text", "threads": 1, "data": "{}",
    "grid": {{"model": "small-text", "impl": "streambp", "seq_len": 16, "partition": 8, "logits_partition": 8,
             "batch": 1}},
    "measure": {{"memory": true, "train": {{"steps": 2, "lr": 0.001, "eval_every": 2, "eval_batches": 1}}}}}})",
                                                     data));
  const json cell = json_file(run_scenario(s, opt).results_path).at("cells").at(0);
  ASSERT_EQ(cell.at("status"), "ok") << cell.dump();
  EXPECT_EQ(cell.at("data").at("sha256"), manifest.at("sha256"));
  EXPECT_EQ(cell.at("data").at("eval_sequences"), 1);
}

// The output folder travels to GPU machines in a 64 MiB carry. Earlier versions downloaded the package into
// OUT/deb/ and unpacked it there (83 MB); the download now goes to --cache, and a run removes an old
// OUT/deb/ (its .deb moves to the cache). Like the tests beside it, it reads --sources: the package's own
// download needs the network.
TEST(TextData, TheOutputFolderHoldsItsThreeFilesAndNoDownload) {
  const std::string python = python_with_tokenizers();
  if (python.empty()) GTEST_SKIP() << BPBENCH_PYTHON << " cannot import tokenizers (run scripts/setup.sh)";
  TempDir tmp;
  write_corpus(tmp);
  const std::string out = tmp.sub("out"), deb = "python3.11-doc_3.11.2-6+deb12u9_all.deb";
  std::ofstream(tmp.sub("out/deb") + "/" + deb) << "an earlier version's download";
  std::ofstream(tmp.sub("out/deb/unpacked/usr/share/doc") + "/index.rst.txt") << "unpacked\n";
  const std::string args =
      fmt::format("--sources '{}' --vocab 300 --seq-len 16 --out '{}'", tmp.file("src"), out);
  ASSERT_EQ(text_data(python, args + fmt::format(" --cache '{}'", tmp.file("cache")), tmp.file("log")), 0)
      << file_text(tmp.file("log"));

  std::vector<std::string> names;
  std::uintmax_t bytes = 0;
  for (const auto& entry : fs::recursive_directory_iterator(out)) {
    names.push_back(entry.path().lexically_relative(out).string());
    if (entry.is_regular_file()) bytes += entry.file_size();
  }
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names, ::testing::ElementsAre("python_docs_V300_T16.json", "python_docs_V300_T16.manifest.json",
                                            "python_docs_tokenizer_V300.json"))
      << file_text(tmp.file("log"));
  EXPECT_LT(bytes, std::uintmax_t{64} << 20);
  EXPECT_EQ(file_text(tmp.file("cache/" + deb)), "an earlier version's download");

  // A cache inside the output folder would be carried with it: refused.
  EXPECT_EQ(WEXITSTATUS(text_data(python, args + fmt::format(" --cache '{}/cache'", out), tmp.file("log"))),
            2);
  EXPECT_THAT(file_text(tmp.file("log")), ::testing::HasSubstr("is inside --out"));
}

TEST(TextData, BadArgumentsAreOneLineErrors) {
  const std::string python = python_with_tokenizers();
  if (python.empty()) GTEST_SKIP() << BPBENCH_PYTHON << " cannot import tokenizers (run scripts/setup.sh)";
  TempDir tmp;
  write_corpus(tmp);
  const std::string log = tmp.file("log");
  EXPECT_EQ(WEXITSTATUS(text_data(python, "--vocab 10", log)), 2);
  EXPECT_THAT(file_text(log), ::testing::HasSubstr("--vocab must be in [257, 1048576]"));
  EXPECT_EQ(WEXITSTATUS(text_data(python, fmt::format("--sources '{}'", tmp.file("none")), log)), 2);
  EXPECT_THAT(file_text(log), ::testing::HasSubstr("no such directory"));
  // A corpus shorter than one sequence.
  EXPECT_EQ(WEXITSTATUS(text_data(python,
                                  fmt::format("--sources '{}' --vocab 300 --seq-len 100000 --out '{}'",
                                              tmp.file("src"), tmp.file("out")),
                                  log)),
            2);
  EXPECT_THAT(file_text(log), ::testing::HasSubstr("fewer than one sequence"));
}

}  // namespace
}  // namespace bpbench::testing::test_text_data
