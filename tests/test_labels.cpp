// Every test that needs CUDA is labelled gpu (tests/CMakeLists.txt: "Cuda" in its suite's name, or
// a file named for CUDA), so the GPU check's `ctest -L gpu` runs it: on a machine without a GPU
// such a test only skips, and a missing label would hide it for good.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"

namespace bcd {
namespace {

// What a test body does when it needs a CUDA device or CUDA LibTorch.
const char* const kCudaMarks[] = {"torch::cuda::is_available", "no_device_reason", "SKIP_WITHOUT_DEVICE",
                                  "SKIP_WITHOUT_TORCH_CUDA",   "torch::kCUDA",     ".cuda()",
                                  "cudaMalloc",                "cudaStream"};

TEST(TestLabels, EveryTestThatNeedsADeviceCarriesItsLabel) {
  const std::regex test_head(R"(\bTEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\))");
  const std::regex gpu_suite("Cuda");  // BCD_GPU_TEST_NAME in tests/CMakeLists.txt
  int files = 0, found = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("tests"))) {
    const std::string file = e.path().filename().string();
    if (file.rfind("test_", 0) != 0 || e.path().extension() != ".cpp" || file == "test_labels.cpp") continue;
    ++files;
    if (file.find("cuda") != std::string::npos) continue;  // labelled gpu as a whole
    const std::string text = test::read_text(e.path().string());
    std::vector<std::smatch> heads;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), test_head); it != std::sregex_iterator(); ++it)
      heads.push_back(*it);
    for (size_t i = 0; i < heads.size(); ++i) {
      const size_t from = static_cast<size_t>(heads[i].position(0));
      const size_t to = i + 1 < heads.size() ? static_cast<size_t>(heads[i + 1].position(0)) : text.size();
      const std::string body = text.substr(from, to - from);
      bool cuda = false;
      for (const char* m : kCudaMarks) cuda |= body.find(m) != std::string::npos;
      if (!cuda) continue;
      ++found;
      const std::string name = heads[i][1].str() + "." + heads[i][2].str();
      EXPECT_TRUE(std::regex_search(heads[i][1].str(), gpu_suite))
          << file << ": " << name << " needs CUDA but its suite's name does not carry the gpu label (Cuda)";
    }
  }
  EXPECT_GT(files, 20) << "the tests' sources were not found";
  EXPECT_GE(found, 2) << "no CUDA test found outside the cuda files: the marks no longer match the tests";
}

}  // namespace
}  // namespace bcd
