// safetensors tests: the writer's output parsed back byte for byte; every kind of malformed file
// rejected with a message naming the file, the tensor and what was expected.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "model/safetensors.h"
#include "base/error.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file image: length field, header text as given (no padding), data.
std::string image(const std::string& header, const std::string& data = "") { return le64(header.size()) + header + data; }

using test::error_of;

TEST(Safetensors, WriterOutputParsesBack) {
  test::TempDir dir;
  const std::string path = dir.file("t.safetensors");
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  std::vector<uint16_t> b = {0x3f80, 0xc000, 0x0001, 0x7f80};
  std::vector<int64_t> d = {-42};
  {
    st::SafetensorsWriter w(path,
                            {{"zeta.a", st::Dtype::kF32, {2, 3}},
                             {"alpha.b", st::Dtype::kBF16, {4}},
                             {"mid.empty", st::Dtype::kF16, {0, 5}},
                             {"scalar", st::Dtype::kI64, {}}},
                            {{"format", "pt"}});
    w.write_next(a.data(), a.size() * 4);
    w.write_next(b.data(), b.size() * 2);
    w.write_next(nullptr, 0);
    w.write_next(d.data(), 8);
    w.commit();
  }
  // Only the final file: the temporary one was renamed.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

  const std::string raw = test::read_text(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  EXPECT_EQ(raw.size(), 8 + n + 24 + 8 + 0 + 8);
  const std::string header = raw.substr(8, n);
  EXPECT_LT(header.find("\"__metadata__\""), header.find("\"alpha.b\""));
  EXPECT_LT(header.find("\"alpha.b\""), header.find("\"mid.empty\""));
  EXPECT_LT(header.find("\"mid.empty\""), header.find("\"scalar\""));
  EXPECT_LT(header.find("\"scalar\""), header.find("\"zeta.a\""));
  EXPECT_NO_THROW(json::parse(header));

  st::SafetensorsFile f(path);
  const st::Header& h = f.header();
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.data_start, 8 + n);
  const st::TensorInfo* ta = h.find("zeta.a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, st::Dtype::kF32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->begin, 0u);  // data in the writer's order, not the header's
  std::vector<uint8_t> got = f.read(*ta);
  EXPECT_EQ(std::memcmp(got.data(), a.data(), 24), 0);
  const st::TensorInfo* tb = h.find("alpha.b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->begin, 24u);
  got = f.read(*tb);
  EXPECT_EQ(std::memcmp(got.data(), b.data(), 8), 0);
  EXPECT_EQ(h.find("mid.empty")->numel(), 0);
  EXPECT_EQ(h.find("mid.empty")->nbytes(), 0u);
  got = f.read(*h.find("scalar"));
  EXPECT_EQ(std::memcmp(got.data(), d.data(), 8), 0);
  EXPECT_EQ(h.find("nope"), nullptr);

  // The in-memory parser agrees with the file reader.
  st::Header hm = st::parse_safetensors(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), "mem");
  ASSERT_EQ(hm.tensors.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(hm.tensors[i].name, h.tensors[i].name);
    EXPECT_EQ(hm.tensors[i].begin, h.tensors[i].begin);
    EXPECT_EQ(hm.tensors[i].end, h.tensors[i].end);
  }
}

TEST(Safetensors, AbandonedWriterLeavesNothing) {
  test::TempDir dir;
  {
    st::SafetensorsWriter w(dir.file("t.safetensors"), {{"a", st::Dtype::kF32, {1}}, {"b", st::Dtype::kF32, {1}}}, {});
    float x = 1;
    w.write_next(&x, 4);
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Safetensors, DtypeNamesAndSizes) {
  const std::pair<const char*, size_t> known[] = {{"BF16", 2}, {"F16", 2}, {"F32", 4}, {"F64", 8}, {"I64", 8},
                                                  {"BOOL", 1}, {"U8", 1},  {"F8_E4M3", 1}};
  for (const auto& [name, size] : known) {
    st::Dtype d;
    ASSERT_TRUE(st::dtype_from_name(name, d)) << name;
    EXPECT_STREQ(st::dtype_name(d), name);
    EXPECT_EQ(st::dtype_size(d), size) << name;
  }
  st::Dtype d;
  EXPECT_FALSE(st::dtype_from_name("bf16", d));
  EXPECT_FALSE(st::dtype_from_name("Q4_0", d));
}

struct BadFile {
  const char* what;
  std::string bytes;
  std::vector<std::string> needles;
};

TEST(Safetensors, RejectsMalformedFilesNamingTheProblem) {
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": " + offsets + "}";
  };
  const std::string ok_w = "\"w\": " + entry("F32", "[2]", "[0, 8]");
  const std::vector<BadFile> cases = {
      {"truncated length field", std::string("\x05\x00\x00", 3), {"truncated", "at least 8"}},
      {"empty file", "", {"truncated"}},
      {"header length over the cap", le64(200ull << 20) + "{}", {"header length 209715200", "exceeds the limit"}},
      {"header length over the file", le64(100) + "{}", {"header length 100", "only 2 bytes follow"}},
      {"length field all ones", le64(~0ull) + "{}", {"exceeds the limit"}},
      {"invalid JSON", image("{\"w\": {\"dtype\": "), {"not valid JSON"}},
      {"invalid UTF-8", image("{\"\xff\": 1}"), {"not valid JSON"}},
      {"non-object header", image("[1, 2]"), {"must be a JSON object", "array"}},
      {"entry not an object", image("{\"w\": 3}"), {"tensor \"w\"", "expected an object"}},
      {"unknown dtype", image("{" + ok_w + ", \"q\": " + entry("Q4", "[1]", "[8, 9]") + "}", std::string(9, 'x')),
       {"tensor \"q\"", "unknown dtype \"Q4\""}},
      {"missing dtype", image("{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", "abcd"), {"tensor \"w\"", "missing dtype"}},
      {"negative dimension", image("{\"w\": " + entry("F32", "[-2]", "[0, 8]") + "}", std::string(8, 'x')),
       {"tensor \"w\"", "shape entry -2", "non-negative integer"}},
      {"fractional dimension", image("{\"w\": " + entry("F32", "[2.0]", "[0, 8]") + "}", std::string(8, 'x')),
       {"tensor \"w\"", "non-negative integer"}},
      {"shape product overflows", image("{\"w\": " + entry("F32", "[4294967296, 4294967296]", "[0, 8]") + "}", std::string(8, 'x')),
       {"tensor \"w\"", "overflows"}},
      {"byte size overflows", image("{\"w\": " + entry("F64", "[4611686018427387904]", "[0, 8]") + "}", std::string(8, 'x')),
       {"tensor \"w\"", "overflows"}},
      {"shape/offset size mismatch", image("{\"w\": " + entry("F32", "[3]", "[0, 8]") + "}", std::string(8, 'x')),
       {"tensor \"w\"", "span 8 bytes, expected 12", "[3]"}},
      {"overlapping offsets",
       image("{" + ok_w + ", \"v\": " + entry("F32", "[2]", "[4, 12]") + "}", std::string(12, 'x')),
       {"\"w\" [0, 8]", "\"v\" [4, 12]", "overlap"}},
      {"offsets beyond the data", image("{\"w\": " + entry("F32", "[4]", "[0, 16]") + "}", std::string(8, 'x')),
       {"tensor \"w\"", "beyond the data section of 8 bytes"}},
      {"begin after end", image("{\"w\": " + entry("F32", "[0]", "[8, 4]") + "}", std::string(8, 'x')),
       {"tensor \"w\"", "begin after end"}},
      {"offsets not a pair", image("{\"w\": " + entry("F32", "[2]", "[0, 8, 9]") + "}", std::string(9, 'x')),
       {"tensor \"w\"", "data_offsets must be [begin, end]"}},
      {"negative offset", image("{\"w\": " + entry("F32", "[2]", "[-8, 0]") + "}", std::string(8, 'x')),
       {"tensor \"w\"", "data_offsets must be"}},
      {"metadata not strings", image("{\"__metadata__\": {\"format\": 1}, " + ok_w + "}", std::string(8, 'x')),
       {"__metadata__ key \"format\"", "must be a string"}},
      {"metadata not an object", image("{\"__metadata__\": [], " + ok_w + "}", std::string(8, 'x')),
       {"__metadata__ must be an object"}},
      {"duplicate tensor name", image("{" + ok_w + ", " + ok_w + "}", std::string(8, 'x')), {"tensor \"w\"", "twice"}},
  };
  test::TempDir dir;
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string mem =
        error_of([&] { st::parse_safetensors(reinterpret_cast<const uint8_t*>(c.bytes.data()), c.bytes.size(), "buf.st"); });
    ASSERT_FALSE(mem.empty()) << "accepted in memory";
    EXPECT_EQ(mem.rfind("buf.st: ", 0), 0u) << mem;
    const std::string path = dir.file("bad.safetensors");
    test::write_text(path, c.bytes);
    const std::string disk = error_of([&] { st::SafetensorsFile f(path); });
    ASSERT_FALSE(disk.empty()) << "accepted from disk";
    EXPECT_EQ(disk.rfind(path + ": ", 0), 0u) << disk;
    for (const auto& n : c.needles) {
      EXPECT_NE(mem.find(n), std::string::npos) << "missing '" << n << "' in: " << mem;
      EXPECT_NE(disk.find(n), std::string::npos) << "missing '" << n << "' in: " << disk;
    }
  }
}

TEST(Safetensors, AcceptsZeroSizedTensorsAndHoles) {
  // Empty ranges never overlap anything; bytes no tensor claims are allowed.
  const std::string h = R"({"a": {"dtype": "F32", "shape": [0, 1099511627776], "data_offsets": [4, 4]},)"
                        R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                        R"( "c": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]}})";
  const std::string bytes = image(h, std::string(8, 'x'));
  st::Header hd = st::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "buf");
  ASSERT_EQ(hd.tensors.size(), 3u);
  EXPECT_EQ(hd.find("a")->numel(), 0);
  EXPECT_EQ(hd.find("c")->nbytes(), 2u);
}

TEST(Safetensors, ReadOfAFileTruncatedAfterOpenFails) {
  test::TempDir dir;
  const std::string path = dir.file("t.safetensors");
  {
    st::SafetensorsWriter w(path, {{"w", st::Dtype::kF32, {64}}}, {});
    std::vector<float> x(64, 1.0f);
    w.write_next(x.data(), x.size() * 4);
    w.commit();
  }
  st::SafetensorsFile f(path);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(f.header().data_start + 10)), 0);
  const std::string e = error_of([&] { f.read(*f.header().find("w")); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("\"w\""), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

}  // namespace
}  // namespace bcd
