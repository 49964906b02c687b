// Tests of the reading side on synthetic token files (dataset_test_helpers.h): the DataLoader's
// batch sequence against golden hashes of the in-memory loader.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "io/loader.h"
#include "base/error.h"
#include "dataset_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

using test::TempDir;

constexpr int64_t kTrainTokens = 50000, kValTokens = 3000, kVocab = 1000;

// The golden files: plain and masked, built once per process.
struct GoldenFiles {
  TempDir tmp{"bcd-loader"};
  std::string plain = tmp.file("plain"), masked = tmp.file("masked");
  GoldenFiles() {
    test::TokenFile f;
    f.train = test::pattern_tokens(kTrainTokens, kVocab);
    f.val = test::pattern_tokens(kValTokens, kVocab, 501);
    f.vocab = kVocab;
    std::filesystem::create_directories(plain);
    test::write_token_file(plain, f);
    f.train_mask = test::pattern_mask(kTrainTokens);
    f.val_mask = test::pattern_mask(kValTokens, 333);
    std::filesystem::create_directories(masked);
    test::write_token_file(masked, f);
  }
};

const GoldenFiles& golden_files() {
  static std::unique_ptr<GoldenFiles> g = std::make_unique<GoldenFiles>();
  return *g;
}

// ---- The batch sequence ----

struct GoldenCase {
  const char* name;
  bool masked;
  Split split;
  bool shuffle;
  uint64_t seed;
  int rank, world;
  std::optional<LoaderState> from;  // restore() to this state first
  int batches;
  uint64_t hash;  // of the batches the in-memory loader gives
};

// XXH64 over every batch's int64 token bytes, then (masked) its float mask bytes and its divisor.
uint64_t hash_batches(DataLoader& dl, int batches) {
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> st(XXH64_createState(), &XXH64_freeState);
  XXH64_reset(st.get(), 0);
  for (int i = 0; i < batches; ++i) {
    const Batch b = dl.next();
    XXH64_update(st.get(), b.tokens.data_ptr<int64_t>(), b.tokens.numel() * sizeof(int64_t));
    if (b.mask.defined()) XXH64_update(st.get(), b.mask.data_ptr<float>(), b.mask.numel() * sizeof(float));
    XXH64_update(st.get(), &b.divisor, sizeof b.divisor);
  }
  return XXH64_digest(st.get());
}

// B = 3, T = 17: the train split has W = (50000 - 17) / 17 = 2940 windows per shuffled epoch, the
// val split (3000 - 1) / 17 = 176 in order, so the runs below cross epoch ends.
TEST(DataLoader, BatchesMatchTheInMemoryLoader) {
  const int64_t B = 3, T = 17;
  const std::vector<GoldenCase> cases = {
      {"train seed 1", false, Split::kTrain, true, 1, 0, 1, {}, 40, 0xe3402e27df00ef1e},
      {"train seed 2", false, Split::kTrain, true, 2, 0, 1, {}, 40, 0xe82501276dee535e},
      {"train seed 987654321", false, Split::kTrain, true, 987654321, 0, 1, {}, 40, 0x5ddc5bd15e215f63},
      {"train seed 1 from mid-epoch 2", false, Split::kTrain, true, 1, 0, 1, LoaderState{2, 1234}, 40, 0x9382d56cf4ceb3c0},
      {"train seed 5 across an epoch end", false, Split::kTrain, true, 5, 0, 1, LoaderState{1, 2930}, 20, 0x82b88dc8a3a7812e},
      {"val in order", false, Split::kVal, false, 0, 0, 1, {}, 70, 0xa896b28ead8fe816},
      {"train in order", false, Split::kTrain, false, 3, 0, 1, {}, 30, 0xd0082c079455b2d2},
      {"train seed 7 rank 0 of 2", false, Split::kTrain, true, 7, 0, 2, {}, 30, 0x81d3d65309dacfbd},
      {"train seed 7 rank 1 of 2", false, Split::kTrain, true, 7, 1, 2, {}, 30, 0x37876bab4faf0d9c},
      {"train seed 7 rank 1 of 2 across an epoch end", false, Split::kTrain, true, 7, 1, 2, LoaderState{0, 2925}, 10, 0xdba2715986edba48},
      {"masked train seed 3", true, Split::kTrain, true, 3, 0, 1, {}, 40, 0x2faa4b9a339127e4},
      {"masked train seed 3 rank 1 of 2 across an epoch end", true, Split::kTrain, true, 3, 1, 2, LoaderState{1, 2930}, 20, 0x0ad07875ecd8b55a},
      {"masked val in order rank 0 of 2", true, Split::kVal, false, 0, 0, 2, {}, 40, 0xf57d4e8b731c550c},
      {"masked val in order", true, Split::kVal, false, 0, 0, 1, {}, 70, 0xd5f7e6bf6865c323},
  };
  const TokenDataset plain = TokenDataset::open(golden_files().plain);
  const TokenDataset masked = TokenDataset::open(golden_files().masked);
  for (const GoldenCase& c : cases) {
    for (bool prefetch : {true, false}) {
      SCOPED_TRACE(fmt::format("{}, prefetch {}", c.name, prefetch));
      DataLoader dl(c.masked ? masked : plain, c.split, B, T, c.seed, c.shuffle, prefetch, c.rank, c.world);
      EXPECT_EQ(dl.windows_per_epoch(), c.split == Split::kTrain ? (c.shuffle ? 2940 : 2941) : 176);
      if (c.from) dl.restore(*c.from);
      const uint64_t h = hash_batches(dl, c.batches);
      EXPECT_EQ(h, c.hash) << fmt::format("\"{}\": 0x{:016x}", c.name, h);
    }
  }
}

}  // namespace
}  // namespace bcd
