// test_data_file.cpp: token data files: ids reach the batch unchanged (inputs equal the file, targets the ids
// shifted by one with -100 on padding), cropping and -1 padding to seq_len, SHA-256 against the FIPS 180
// vectors, and one clear error per kind of bad file.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness/objectives/batch.h"
#include "harness/objectives/data_file.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_data_file {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DataFile : public ::testing::Test {
 protected:
  DataFile() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("bpbench-DataFile-{}-{}", info->name(), ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~DataFile() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& content, const std::string& name = "tokens.json") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  // The one-line std::runtime_error that loading `content` gives; it names the file.
  std::string load_error(const std::string& content, int64_t seq_len = 6, int64_t vocab = 97) {
    const std::string path = write(content);
    try {
      load_token_data(path, seq_len, vocab);
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_THAT(msg, HasSubstr(path));
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      return msg;
    }
    ADD_FAILURE() << "no std::runtime_error for " << content;
    return "";
  }

  fs::path dir_;
};

TEST_F(DataFile, Sha256KnownVectors) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // 56 bytes: the length no longer fits the first padding block, so padding spills into a second.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Many full blocks.
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_F(DataFile, CropsAndPads) {
  const std::string content = "[[5, 6, 7, 8], [1, 2], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [96]]";
  const std::string path = write(content, "my-data.json");
  TokenData d = load_token_data(path, 6, 97);
  EXPECT_EQ(d.sequences, 4);
  EXPECT_EQ(d.file_name, "my-data.json");
  EXPECT_EQ(d.sha256, sha256_hex(content));
  EXPECT_EQ(d.tokens.scalar_type(), torch::kLong);
  auto want = torch::tensor({5,  6,  7,  8,  -1, -1,  //
                             1,  2,  -1, -1, -1, -1,  //
                             3,  4,  5,  6,  7,  8,   //
                             96, -1, -1, -1, -1, -1},
                            torch::kLong)
                  .view({4, 6});
  EXPECT_TRUE(torch::equal(d.tokens, want)) << d.tokens;
}

TEST_F(DataFile, TokensReachTheBatchUnchanged) {
  const std::vector<std::vector<int64_t>> rows = {{5, 6, 7, 8}, {1, 2}, {3, 4, 5, 6, 7, 8, 9}};
  const int64_t T = 6;
  TokenData d = load_token_data(write("[[5, 6, 7, 8], [1, 2], [3, 4, 5, 6, 7, 8, 9]]"), T, 97);

  BatchSpec spec;
  spec.examples = 3;
  spec.seq_len = T;
  spec.vocab = 97;
  spec.seed = 1;
  spec.data_tokens = d.tokens;
  auto check = [&](const Batch& b) {
    ASSERT_EQ(b.sequences(), 3);
    int64_t loss_tokens = 0;
    for (int64_t n = 0; n < 3; ++n) {
      const int64_t len = std::min<int64_t>(T, static_cast<int64_t>(rows[n].size()));
      for (int64_t t = 0; t < T; ++t) {
        const int64_t id = b.input_ids[n][t].item<int64_t>(), target = b.targets[n][t].item<int64_t>();
        if (t < len) {
          EXPECT_EQ(id, rows[n][t]) << "row " << n << " position " << t;
        } else {
          EXPECT_EQ(id, 0) << "padding is id 0 in the batch: row " << n << " position " << t;
        }
        const int64_t want = t + 1 < len ? rows[n][t + 1] : kIgnoreIndex;
        EXPECT_EQ(target, want) << "row " << n << " position " << t;
        loss_tokens += want != kIgnoreIndex;
      }
    }
    EXPECT_EQ(b.loss_tokens, loss_tokens);
  };
  check(make_token_batch(spec, 3, 1, 0, torch::kCPU));
  // And through the SFT objective, the path the runner takes.
  Model model = tiny_model({2, false}, torch::kFloat);
  check(make_objective("sft")->make_batch(spec, model, T));
}

TEST_F(DataFile, Errors) {
  const std::string missing = (dir_ / "absent.json").string();
  try {
    load_token_data(missing, 6, 97);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(missing));
    EXPECT_THAT(e.what(), HasSubstr("cannot open"));
  }
  EXPECT_THAT(load_error("[[1, 2], [3"), HasSubstr("malformed JSON"));
  EXPECT_THAT(load_error(R"({"input_ids": [[1, 2]]})"), HasSubstr("top level is not a list"));
  EXPECT_THAT(load_error("[1, 2, 3]"), HasSubstr("sequence 0 is not a list"));
  EXPECT_THAT(load_error("[[1, 2], [3, 2.5]]"), HasSubstr("sequence 1 position 1 is 2.5"));
  EXPECT_THAT(load_error(R"([[1, "2"]])"), HasSubstr("sequence 0 position 1 is \"2\""));
  EXPECT_THAT(load_error("[[1, true]]"), HasSubstr("sequence 0 position 1 is true"));
  EXPECT_THAT(load_error("[]"), HasSubstr("list of sequences is empty"));
  EXPECT_THAT(load_error("[[1], []]"), HasSubstr("sequence 1 is empty"));
  EXPECT_THAT(load_error("[[1, 97]]"), HasSubstr("token id 97 is outside [0, 97)"));
  EXPECT_THAT(load_error("[[-1, 3]]"), HasSubstr("token id -1 is outside [0, 97)"));
  // Cropped positions are checked too: the file was made for another vocabulary.
  EXPECT_THAT(load_error("[[1, 2, 3, 4, 5, 6, 7, 500]]"), HasSubstr("sequence 0 position 7: token id 500"));
}

}  // namespace
}  // namespace bpbench::testing::test_data_file
