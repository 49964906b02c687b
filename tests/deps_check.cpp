// Each library a bcdtrain build links, used once, and the folder each was loaded from. Built
// only on demand (target bcd_deps_check) by the test that simulates a bare GPU machine
// (tests/scripts/test_gpu_deps.sh): configured against the Debian packages scripts/gpu_deps.sh
// unpacks, it must compile, link and run against those, not the system's. LibTorch is not among
// them: the GPU machine's pip torch brings it.
#include <dlfcn.h>
#include <link.h>
#include <liburing.h>
#include <tbb/parallel_reduce.h>
#include <tbb/blocked_range.h>
#include <tbb/task_arena.h>
#include <xxhash.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <H5Cpp.h>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <toml++/toml.h>
#include <unistd.h>
#include <vector>

namespace {

// The file the loader mapped the library holding `symbol` from ("" if none).
std::string loaded_from(const void* symbol) {
  Dl_info info{};
  if (::dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return std::filesystem::canonical(info.dli_fname).string();
}

void say_loaded(const char* what, const void* symbol) {
  std::printf("loaded %s from %s\n", what, loaded_from(symbol).c_str());
}

TEST(Deps, Tbb) {
  const long sum = tbb::parallel_reduce(
      tbb::blocked_range<long>(0, 1000), 0L,
      [](const tbb::blocked_range<long>& r, long acc) {
        for (long i = r.begin(); i != r.end(); ++i) acc += i;
        return acc;
      },
      [](long a, long b) { return a + b; });
  EXPECT_EQ(sum, 999L * 1000 / 2);
  EXPECT_GE(tbb::this_task_arena::max_concurrency(), 1);
  say_loaded("tbb", reinterpret_cast<const void*>(&tbb::detail::r1::max_concurrency));
}

TEST(Deps, Hdf5WritesAndReadsBack) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("bcd-deps-check-" + std::to_string(::getpid()) + ".h5");
  {
    H5::H5File f(path, H5F_ACC_TRUNC);
    const hsize_t n = 4;
    H5::DataSpace space(1, &n);
    const std::vector<int> v{1, 2, 3, 4};
    f.createDataSet("v", H5::PredType::NATIVE_INT, space).write(v.data(), H5::PredType::NATIVE_INT);
  }
  std::vector<int> back(4);
  H5::H5File(path, H5F_ACC_RDONLY).openDataSet("v").read(back.data(), H5::PredType::NATIVE_INT);
  std::filesystem::remove(path);
  EXPECT_EQ(back, (std::vector<int>{1, 2, 3, 4}));
  say_loaded("hdf5", reinterpret_cast<const void*>(&H5open));
  say_loaded("hdf5_cpp", reinterpret_cast<const void*>(static_cast<void (*)(unsigned&, unsigned&, unsigned&)>(&H5::H5Library::getLibVersion)));
}

TEST(Deps, FmtTomlCliJson) {
  EXPECT_EQ(fmt::format("{:>4}", 7), "   7");
  say_loaded("fmt", reinterpret_cast<const void*>(static_cast<std::string (*)(fmt::string_view, fmt::format_args)>(&fmt::vformat)));
  auto t = toml::parse("[train]\nsteps = 3\n");
  EXPECT_EQ(t["train"]["steps"].value_or(0), 3);
  CLI::App app("deps");
  int steps = 0;
  app.add_option("--steps", steps);
  const char* argv[] = {"deps", "--steps", "5"};
  app.parse(3, argv);
  EXPECT_EQ(steps, 5);
  const nlohmann::json j = {{"a", 1}};
  EXPECT_EQ(j.dump(), "{\"a\":1}");
}

TEST(Deps, UringAndXxhash) {
  // A ring may be refused where a sandbox forbids io_uring; the library must load either way.
  io_uring ring{};
  const int rc = io_uring_queue_init(4, &ring, 0);
  if (rc == 0) io_uring_queue_exit(&ring);
  std::printf("io_uring_queue_init: %d\n", rc);
  say_loaded("uring", reinterpret_cast<const void*>(&io_uring_queue_init));
  EXPECT_EQ(XXH3_64bits("bcd", 3), XXH3_64bits("bcd", 3));
  EXPECT_NE(XXH3_64bits("bcd", 3), XXH3_64bits("bce", 3));
  say_loaded("xxhash", reinterpret_cast<const void*>(&XXH3_64bits));
}

TEST(Deps, Pcre2AndUtf8proc) {
  // src/data/hf_*.cpp: Unicode properties and the JIT of PCRE2, NFC of utf8proc.
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>("\\p{L}+"), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  ASSERT_NE(re, nullptr) << err;
  std::printf("pcre2 JIT: %d\n", pcre2_jit_compile(re, PCRE2_JIT_COMPLETE));
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  const char* text = "12 \xC3\xA9t\xC3\xA9";  // "12 été"
  EXPECT_EQ(pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text), std::strlen(text), 0, 0, md, nullptr), 1);
  EXPECT_EQ(pcre2_get_ovector_pointer(md)[0], 3u);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  say_loaded("pcre2", reinterpret_cast<const void*>(&pcre2_compile_8));
  utf8proc_uint8_t* nfc = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>("e\xCC\x81"));
  ASSERT_NE(nfc, nullptr);
  EXPECT_STREQ(reinterpret_cast<const char*>(nfc), "\xC3\xA9");
  std::free(nfc);
  say_loaded("utf8proc", reinterpret_cast<const void*>(&utf8proc_NFC));
}

TEST(Deps, SentencepieceLoadsAsTheTokenizerLoadsIt) {
  // src/data/tokenizer.cpp dlopen()s these by soname, with the same flags.
  for (const char* name : {"libsentencepiece.so.0", "libsentencepiece_train.so.0"}) {
    void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    ASSERT_NE(h, nullptr) << name << ": " << ::dlerror();
    link_map* map = nullptr;
    ASSERT_EQ(::dlinfo(h, RTLD_DI_LINKMAP, &map), 0);
    std::printf("loaded %s from %s\n", name, std::filesystem::canonical(map->l_name).c_str());
  }
}

TEST(Deps, FortunesToTrainOn) {
  const char* dir = std::getenv("BCD_FORTUNES_DIR");
  const std::filesystem::path fortunes = dir != nullptr ? dir : "/usr/share/games/fortunes";
  EXPECT_TRUE(std::filesystem::is_regular_file(fortunes / "fortunes")) << fortunes;
  EXPECT_TRUE(std::filesystem::is_regular_file(fortunes / "science")) << fortunes;
  std::printf("fortunes in %s\n", fortunes.c_str());
}

}  // namespace
