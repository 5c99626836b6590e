// test_safetensors.cpp: the safetensors reader against the format spec (a hand-built file, byte by byte), the
// writer/reader round trip bit for bit, sharded model directories, and one clear error per kind of broken
// file.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>

#include "harness/model/safetensors.h"
#include "tests/support/test_support.h"

namespace bpbench::test_safetensors {
namespace {

using testing::error_of;
using testing::file_text;
using testing::TempDir;

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// header length + header + buffer, exactly as the spec lays a file out.
std::string st_file(const std::string& header, const std::string& buffer) {
  return le64(header.size()) + header + buffer;
}

std::string bytes_of(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  auto ca = a.contiguous(), cb = b.contiguous();
  return a.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), a.numel() * a.element_size()) == 0;
}

NamedTensors sample_tensors() {
  torch::manual_seed(11);
  auto f32 = torch::randn({2, 3});
  // Special values must survive bit for bit, sign of zero and NaN payload included.
  f32[0][0] = -0.0f;
  f32[0][1] = std::numeric_limits<float>::infinity();
  f32[0][2] = std::numeric_limits<float>::quiet_NaN();
  return {
      {"model.f32", f32},
      {"model.f64", torch::randn({4}, torch::kDouble)},
      {"model.bf16", torch::randn({3, 2}).to(torch::kBFloat16)},
      {"model.f16", torch::randn({5}).to(torch::kHalf)},
      {"ids.i64", torch::arange(-3, 4, torch::kLong)},
      {"scalar", torch::tensor(2.5f)},
      {"empty", torch::empty({0, 3})},
      {"strided", torch::randn({4, 3}).t()},  // not contiguous: the writer must lay it out row-major
  };
}

TEST(Safetensors, RoundTripIsBitwise) {
  TempDir tmp;
  const auto tensors = sample_tensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "round trip"}};
  const std::string path = tmp.file("a.safetensors");
  save_safetensors(path, tensors, metadata);

  // The layout the spec requires: u64 LE header length, a JSON object, buffer starting 8-byte aligned.
  const std::string raw = file_text(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(raw[8], '{');
  auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["model.bf16"]["dtype"], "BF16");
  EXPECT_EQ(header["model.f64"]["shape"], nlohmann::json::array({4}));
  EXPECT_EQ(header["__metadata__"]["note"], "round trip");

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata(), metadata);
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_NE(f.find(name), nullptr) << name;
    EXPECT_EQ(f.info(name).dtype, safetensors_dtype_name(t.scalar_type())) << name;
    auto back = f.get(name);
    EXPECT_TRUE(bitwise_equal(back, t)) << name;
  }
  EXPECT_EQ(f.find("absent"), nullptr);
  EXPECT_THAT(error_of([&] { f.info("absent"); }), HasSubstr("'absent'"));
}

TEST(Safetensors, ReadsHandCraftedFile) {
  // Built by hand from the spec, independent of the writer: the buffer order (c, a, b) differs from the
  // header's key order, the header ends in the padding spaces the spec allows, and 8 + N is odd so the F32
  // data sits at an unaligned address.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                             R"("b":{"dtype":"I64","shape":[1],"data_offsets":[12,20]},)"
                             R"("c":{"dtype":"BF16","shape":[2,1],"data_offsets":[0,4]},)"
                             R"("__metadata__":{"format":"pt"}}  )";
  ASSERT_EQ((8 + header.size()) % 2, 1u) << "pick a header length that misaligns the buffer";
  const std::string buffer = bytes_of({0xC0, 0x3F, 0x00, 0xC0,                            // c: bf16 1.5, -2.0
                                       0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0,    // a: f32 1.0, -2.5
                                       0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});  // b: i64 7
  TempDir tmp;
  const std::string path = tmp.file("hand.safetensors");
  write_bytes(path, st_file(header, buffer));

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.info("c").shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(f.info("a").begin, 4u);
  EXPECT_EQ(f.info("a").end, 12u);

  auto a = f.get("a");
  EXPECT_EQ(a.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(a, torch::tensor({1.0f, -2.5f})));
  auto b = f.get("b");
  EXPECT_EQ(b.scalar_type(), torch::kLong);
  EXPECT_EQ(b.item<int64_t>(), 7);
  auto c = f.get("c");
  EXPECT_EQ(c.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(c.to(torch::kFloat), torch::tensor({{1.5f}, {-2.0f}})));
  // Conversion on load: straight to the requested dtype.
  auto a64 = f.get("a", torch::TensorOptions().dtype(torch::kDouble));
  EXPECT_EQ(a64.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(a64, torch::tensor({1.0, -2.5}, torch::kDouble)));
  auto c32 = f.get("c", torch::kFloat);
  EXPECT_TRUE(torch::equal(c32, torch::tensor({{1.5f}, {-2.0f}})));
}

TEST(Safetensors, LoadedTensorsAreWritableCopies) {
  TempDir tmp;
  const std::string path = tmp.file("w.safetensors");
  save_safetensors(path, {{"w", torch::ones({4})}});
  torch::Tensor t;
  {
    SafetensorsFile f(path);
    t = f.get("w");
    // Same dtype and device: the result must still not alias the read-only mapping (writing would fault).
    t.add_(1);
    EXPECT_TRUE(torch::equal(f.get("w"), torch::ones({4})));
  }
  EXPECT_TRUE(torch::equal(t, torch::full({4}, 2.0f)));  // outlives the file object
}

TEST(Safetensors, ShardedDirectoryRoundTrip) {
  TempDir tmp;
  const auto tensors = sample_tensors();
  save_safetensors_dir(tmp.path(), tensors, 3);

  for (int k = 1; k <= 3; ++k)
    EXPECT_TRUE(fs::exists(tmp.file(fmt::format("model-{:05d}-of-00003.safetensors", k)))) << k;
  EXPECT_FALSE(fs::exists(tmp.file("model.safetensors")));
  auto index = nlohmann::json::parse(file_text(tmp.file("model.safetensors.index.json")));
  ASSERT_EQ(index["weight_map"].size(), tensors.size());
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.numel() * t.element_size();
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);

  SafetensorsDir dir(tmp.path());
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(dir.names(), names);
  for (const auto& [name, t] : tensors) {
    EXPECT_TRUE(bitwise_equal(dir.get(name), t)) << name;
    EXPECT_EQ(dir.file_of(name), tmp.file(index["weight_map"][name].get<std::string>())) << name;
  }
  // The first tensor is in the first shard and the last in the last: split in order.
  EXPECT_EQ(index["weight_map"]["model.f32"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["strided"], "model-00003-of-00003.safetensors");
}

TEST(Safetensors, SingleFileDirectory) {
  TempDir tmp;
  save_safetensors_dir(tmp.path(), {{"x", torch::arange(6.0).view({2, 3})}}, 1);
  EXPECT_TRUE(fs::exists(tmp.file("model.safetensors")));
  EXPECT_FALSE(fs::exists(tmp.file("model.safetensors.index.json")));
  SafetensorsDir dir(tmp.path());
  EXPECT_EQ(dir.names(), std::vector<std::string>{"x"});
  EXPECT_TRUE(torch::equal(dir.get("x"), torch::arange(6.0).view({2, 3})));
}

TEST(Safetensors, HandWrittenIndex) {
  TempDir tmp;
  save_safetensors(tmp.file("part-a.safetensors"), {{"a", torch::ones({2})}, {"unlisted", torch::ones({1})}});
  save_safetensors(tmp.file("part-b.safetensors"), {{"b", torch::zeros({3})}});
  write_bytes(tmp.file("model.safetensors.index.json"),
              R"({"weight_map": {"a": "part-a.safetensors", "b": "part-b.safetensors"}})");
  SafetensorsDir dir(tmp.path());
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a", "b"}));  // the index is authoritative
  EXPECT_TRUE(torch::equal(dir.get("b"), torch::zeros({3})));
  EXPECT_THAT(error_of([&] { dir.get("unlisted"); }), HasSubstr("'unlisted'"));

  write_bytes(tmp.file("model.safetensors.index.json"), R"({"weight_map": {"c": "part-a.safetensors"}})");
  auto msg = error_of([&] { SafetensorsDir d(tmp.path()); });
  EXPECT_THAT(msg, HasSubstr("'c'"));
  EXPECT_THAT(msg, HasSubstr("part-a.safetensors"));

  write_bytes(tmp.file("model.safetensors.index.json"),
              R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  EXPECT_THAT(error_of([&] { SafetensorsDir d(tmp.path()); }), HasSubstr("not a file name in the directory"));

  write_bytes(tmp.file("model.safetensors.index.json"), R"({"weights": {}})");
  EXPECT_THAT(error_of([&] { SafetensorsDir d(tmp.path()); }), HasSubstr("weight_map"));
}

// ---- broken files: one clear error each
// --------------------------------------------------------------------------

class SafetensorsErrors : public ::testing::Test {
 protected:
  std::string open_error(const std::string& bytes) {
    write_bytes(path_, bytes);
    auto msg = error_of([&] { SafetensorsFile f(path_); });
    EXPECT_THAT(msg, HasSubstr(path_));
    return msg;
  }
  TempDir tmp_;
  std::string path_ = tmp_.file("bad.safetensors");
};

TEST_F(SafetensorsErrors, MissingFile) {
  const std::string missing = tmp_.file("nope.safetensors");
  auto msg = error_of([&] { SafetensorsFile f(missing); });
  EXPECT_THAT(msg, HasSubstr(missing));
  EXPECT_THAT(msg, HasSubstr("cannot open"));
  EXPECT_THAT(error_of([&] { SafetensorsDir d(tmp_.path()); }), HasSubstr("no weights"));
}

TEST_F(SafetensorsErrors, ShorterThanEightBytes) {
  EXPECT_THAT(open_error(std::string("\x02\0\0\0\0", 5)), HasSubstr("shorter than the 8-byte header length"));
}

TEST_F(SafetensorsErrors, HeaderLengthLargerThanFile) {
  EXPECT_THAT(open_error(le64(1000) + "{}"), HasSubstr("header length 1000 is larger than the 2 bytes"));
  EXPECT_THAT(open_error(le64(~uint64_t{0}) + "{}"), HasSubstr("is larger than"));  // no overflow on huge N
}

TEST_F(SafetensorsErrors, MalformedJson) {
  EXPECT_THAT(open_error(st_file(R"({"w": {"dtype": "F32",)", "")), HasSubstr("malformed JSON header"));
  EXPECT_THAT(open_error(st_file("[1, 2]", "")), HasSubstr("not a JSON object"));
  EXPECT_THAT(open_error(st_file("", "")), HasSubstr("malformed JSON header"));
}

TEST_F(SafetensorsErrors, UnknownDtype) {
  auto msg = open_error(st_file(R"({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", "x"));
  EXPECT_THAT(msg, HasSubstr("tensor 'w'"));
  EXPECT_THAT(msg, HasSubstr("unknown dtype 'F8_E4M3'"));
  EXPECT_THAT(msg, HasSubstr("BF16"));  // lists the supported ones
}

TEST_F(SafetensorsErrors, OffsetsOfWrongSize) {
  auto msg = open_error(
      st_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", std::string(8, '\0')));
  EXPECT_THAT(msg, HasSubstr("tensor 'w'"));
  EXPECT_THAT(msg, HasSubstr("hold 4 bytes but F32 [2] needs 8"));
  msg = open_error(
      st_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", std::string(8, 0)));
  EXPECT_THAT(msg, HasSubstr("end before they begin"));
  msg =
      open_error(st_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", std::string(8, 0)));
  EXPECT_THAT(msg, HasSubstr("tensor 'w'"));
  msg = open_error(
      st_file(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", std::string(8, 0)));
  EXPECT_THAT(msg, HasSubstr("not a non-negative integer"));
}

TEST_F(SafetensorsErrors, OffsetsOutOfBounds) {
  auto msg = open_error(
      st_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", std::string(8, '\0')));
  EXPECT_THAT(msg, HasSubstr("tensor 'w'"));
  EXPECT_THAT(msg, HasSubstr("out of bounds"));
}

TEST_F(SafetensorsErrors, OverlappingTensors) {
  auto msg = open_error(st_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                                R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                std::string(12, '\0')));
  EXPECT_THAT(msg, HasSubstr("tensor 'b'"));
  EXPECT_THAT(msg, HasSubstr("overlap tensor 'a'"));
}

TEST_F(SafetensorsErrors, TruncatedFile) {
  save_safetensors(path_, {{"first", torch::ones({4})}, {"last", torch::ones({4})}});
  std::string bytes = file_text(path_);
  auto msg = open_error(bytes.substr(0, bytes.size() - 3));
  EXPECT_THAT(msg, HasSubstr("tensor 'last'"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST_F(SafetensorsErrors, BadMetadata) {
  auto msg = open_error(st_file(R"({"__metadata__": {"k": 1}})", ""));
  EXPECT_THAT(msg, HasSubstr("__metadata__"));
  EXPECT_THAT(msg, HasSubstr("'k'"));
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir tmp;
  const std::string path = tmp.file("w.safetensors");
  EXPECT_THROW(save_safetensors(path, {{"a", torch::ones({1})}, {"a", torch::ones({1})}}),
               std::invalid_argument);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", torch::ones({1})}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(path, {{"c", torch::ones({1}, torch::kComplexFloat)}}),
               std::invalid_argument);
  EXPECT_THROW(save_safetensors(tmp.file("no/such/dir/x.safetensors"), {{"a", torch::ones({1})}}),
               std::runtime_error);
}

}  // namespace
}  // namespace bpbench::test_safetensors
