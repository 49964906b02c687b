// Tests of the reading side on synthetic token files (dataset_test_helpers.h): the DataLoader's
// batch sequence against golden hashes of the in-memory loader it replaced, and TokenDataset's
// windowed reads (ranges, widths, layouts, threads).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
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
  uint64_t hash;  // of the batches the in-memory loader (before windows were read on demand) gave
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

// ---- TokenDataset reads ----

// (start, count) of `n` windows spread over a split of `len` tokens: short ones (a batch row),
// long ones crossing the reader's staging size, both ends of the split, empty ones.
std::vector<std::pair<int64_t, int64_t>> some_windows(int64_t len, int n) {
  std::vector<std::pair<int64_t, int64_t>> w = {{0, len}, {0, 1}, {len - 1, 1}, {len, 0}, {0, 0}, {len - 18, 18}};
  for (int i = 0; static_cast<int>(w.size()) < n; ++i) {
    const int64_t count = i % 10 == 0 ? std::min<int64_t>(len, 9000 + i) : 1 + (i * 37) % 300;
    const int64_t start = (static_cast<int64_t>(i) * 7919 * 13) % (len - count + 1);
    w.emplace_back(start, count);
  }
  return w;
}

// Many threads reading windows of one dataset (and of copies sharing its file) at once get what
// one thread gets, and both equal the ids and mask values the file was written with.
TEST(TokenDataset, WindowsReadInManyThreadsEqualTheSingleThreadedRead) {
  const TokenDataset ds = TokenDataset::open(golden_files().masked);
  ASSERT_TRUE(ds.masked());
  EXPECT_EQ(ds.token_bytes(), 2);
  EXPECT_EQ(ds.file(), golden_files().masked + "/tokens.h5");
  for (Split s : {Split::kTrain, Split::kVal}) {
    SCOPED_TRACE(split_name(s));
    const int64_t n = s == Split::kTrain ? kTrainTokens : kValTokens;
    const std::vector<uint32_t> ids = test::pattern_tokens(n, kVocab, s == Split::kTrain ? 0 : 501);
    const std::vector<uint8_t> mask = test::pattern_mask(n, s == Split::kTrain ? 0 : 333);
    ASSERT_EQ(ds.n_tokens(s), n);
    const std::vector<int32_t> all = ds.read_tokens(s);
    ASSERT_TRUE(std::equal(all.begin(), all.end(), ids.begin(), ids.end()));
    ASSERT_EQ(ds.read_mask(s), mask);

    const auto windows = some_windows(n, 2000);
    struct Got {
      std::vector<int64_t> tokens;
      std::vector<int32_t> narrow;
      std::vector<uint8_t> mask;
    };
    auto read = [&](const TokenDataset& d, std::pair<int64_t, int64_t> w) {
      Got g;
      g.tokens.resize(static_cast<size_t>(w.second));
      g.mask.resize(static_cast<size_t>(w.second));
      d.read_tokens(s, w.first, w.second, g.tokens.data());
      g.narrow = d.read_tokens(s, w.first, w.second);
      d.read_mask(s, w.first, w.second, g.mask.data());
      return g;
    };
    std::vector<Got> serial(windows.size()), parallel(windows.size());
    for (size_t i = 0; i < windows.size(); ++i) serial[i] = read(ds, windows[i]);
    tbb::parallel_for(tbb::blocked_range<size_t>(0, windows.size(), 1), [&](const tbb::blocked_range<size_t>& r) {
      const TokenDataset copy = ds;  // shares the open file
      for (size_t i = r.begin(); i != r.end(); ++i) parallel[i] = read(i % 2 ? copy : ds, windows[i]);
    });
    for (size_t i = 0; i < windows.size(); ++i) {
      const auto [start, count] = windows[i];
      SCOPED_TRACE(fmt::format("window [{}, {})", start, start + count));
      ASSERT_EQ(parallel[i].tokens, serial[i].tokens);
      ASSERT_EQ(parallel[i].narrow, serial[i].narrow);
      ASSERT_EQ(parallel[i].mask, serial[i].mask);
      ASSERT_TRUE(std::equal(serial[i].tokens.begin(), serial[i].tokens.end(), ids.begin() + start));
      ASSERT_TRUE(std::equal(serial[i].narrow.begin(), serial[i].narrow.end(), ids.begin() + start));
      ASSERT_TRUE(std::equal(serial[i].mask.begin(), serial[i].mask.end(), mask.begin() + start));
    }
  }
}

// uint32 ids (a vocabulary past 65536) read back whole, in windows and in batches.
TEST(TokenDataset, WideIdsReadRight) {
  TempDir tmp("bcd-wide");
  test::TokenFile f;
  f.vocab = 100000;
  f.token_bytes = 4;
  f.train = test::pattern_tokens(20000, f.vocab);
  f.val = test::pattern_tokens(2000, f.vocab, 77);
  test::write_token_file(tmp.path(), f);
  const TokenDataset ds = TokenDataset::open(tmp.path());
  EXPECT_EQ(ds.token_bytes(), 4);
  EXPECT_EQ(ds.vocab_size(), 100000);
  EXPECT_FALSE(ds.masked());
  ASSERT_GT(*std::max_element(f.train.begin(), f.train.end()), 65535u);
  const std::vector<int32_t> train = ds.read_tokens(Split::kTrain);
  EXPECT_TRUE(std::equal(train.begin(), train.end(), f.train.begin(), f.train.end()));
  std::vector<int64_t> w(777);
  ds.read_tokens(Split::kVal, 1000, 777, w.data());
  EXPECT_TRUE(std::equal(w.begin(), w.end(), f.val.begin() + 1000));
  DataLoader dl(ds, Split::kVal, 2, 9, 1, /*shuffle=*/false);
  const Batch b = dl.next();
  for (int64_t i = 0; i < 2 * 10; ++i) {
    EXPECT_EQ(b.tokens.data_ptr<int64_t>()[i], f.val[static_cast<size_t>((i / 10) * 9 + i % 10)]) << i;
  }
}

TEST(TokenDataset, RangesOutsideTheSplitAreRefused) {
  const TokenDataset ds = TokenDataset::open(golden_files().masked);
  const std::string file = ds.file();
  std::vector<int64_t> out(64);
  std::vector<uint8_t> m(64);
  EXPECT_TRUE(ds.read_tokens(Split::kVal, kValTokens, 0).empty());
  struct Case {
    const char* name;
    std::function<void()> read;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"past the end", [&] { ds.read_tokens(Split::kVal, kValTokens - 5, 6, out.data()); },
       "entries [2995, 3001) of /val/tokens requested, outside the split's 3000 tokens"},
      {"past the end (vector)", [&] { ds.read_tokens(Split::kTrain, kTrainTokens, 1); }, "[50000, 50001) of /train/tokens"},
      {"negative start", [&] { ds.read_tokens(Split::kTrain, -1, 2, out.data()); }, "[-1, 1) of /train/tokens"},
      {"negative count", [&] { ds.read_tokens(Split::kTrain, 10, -3); }, "[10, 7) of /train/tokens"},
      {"mask past the end", [&] { ds.read_mask(Split::kVal, kValTokens - 1, 2, m.data()); },
       "[2999, 3001) of /val/loss_mask"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string msg = user_error_of(c.read);
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
}

// `bcdtrain prepare` stores every dataset contiguously; one that is not cannot be read in place.
TEST(TokenDataset, ChunkedTokensAreRefusedAtOpen) {
  TempDir tmp("bcd-chunked");
  test::TokenFile f;
  f.train = test::pattern_tokens(10000, f.vocab);
  f.val = test::pattern_tokens(500, f.vocab);
  f.chunked = true;
  test::write_token_file(tmp.path(), f);
  const std::string msg = user_error_of([&] { TokenDataset::open(tmp.path()); });
  EXPECT_NE(msg.find(tmp.file("tokens.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("/train/tokens is not stored contiguously"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bcdtrain prepare"), std::string::npos) << msg;
}

// doc_offsets: n_docs at open, the whole array only when asked, and checked then.
TEST(TokenDataset, DocOffsetsAreReadAndCheckedOnDemand) {
  TempDir tmp("bcd-docs");
  test::TokenFile f;
  f.train = test::pattern_tokens(10500, f.vocab);
  f.val = test::pattern_tokens(500, f.vocab);
  test::write_token_file(tmp.path(), f);
  {
    const TokenDataset ds = TokenDataset::open(tmp.path());
    EXPECT_EQ(ds.n_docs(Split::kTrain), 11);
    EXPECT_EQ(ds.n_docs(Split::kVal), 1);
    std::vector<uint64_t> want;
    for (uint64_t i = 0; i < 10500; i += 1000) want.push_back(i);
    want.push_back(10500);
    EXPECT_EQ(ds.read_doc_offsets(Split::kTrain), want);
    EXPECT_EQ(ds.read_doc_offsets(Split::kVal), (std::vector<uint64_t>{0, 500}));
  }
  test::poke(tmp.file("tokens.h5"), "/train/doc_offsets", 3, 5000);
  const TokenDataset ds = TokenDataset::open(tmp.path());  // the ends are still right
  const std::string msg = user_error_of([&] { ds.read_doc_offsets(Split::kTrain); });
  EXPECT_NE(msg.find(tmp.file("tokens.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("/train/doc_offsets decreases at entry 3 (5000 then 4000)"), std::string::npos) << msg;
}

// A file cut short after open(): the read that reaches past its end names the file; the reads
// before it are fine.
TEST(TokenDataset, FileTruncatedAfterOpenFailsTheReadPastItsEnd) {
  TempDir tmp("bcd-trunc");
  test::TokenFile f;
  f.train = test::pattern_tokens(10000, f.vocab);
  f.val = test::pattern_tokens(500, f.vocab);
  test::write_token_file(tmp.path(), f);
  const std::string file = tmp.file("tokens.h5");
  haddr_t at = 0;
  {
    H5::H5File h(file, H5F_ACC_RDONLY);
    at = h.openDataSet("/train/tokens").getOffset();
  }
  const TokenDataset ds = TokenDataset::open(tmp.path());
  std::filesystem::resize_file(file, at + 2 * 5000);  // half of /train/tokens
  EXPECT_EQ(ds.read_tokens(Split::kTrain, 4000, 1000).size(), 1000u);
  const std::string msg = user_error_of([&] { ds.read_tokens(Split::kTrain, 4990, 20); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("/train/tokens"), std::string::npos) << msg;
  // and a file already short is refused at open
  const std::string again = user_error_of([&] { TokenDataset::open(tmp.path()); });
  EXPECT_NE(again.find(file), std::string::npos) << again;
}

// Past 2^20 windows the epoch's order is computed window by window (no 8-bytes-a-window array):
// an epoch still visits every window exactly once, and the next epoch in another order.
TEST(DataLoader, ComputedOrderOfAHugeEpochVisitsEveryWindowOnce) {
  TempDir tmp("bcd-huge");
  test::TokenFile f;
  const int64_t n = (int64_t{1} << 20) + 54321;
  f.train.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) f.train[static_cast<size_t>(i)] = static_cast<uint32_t>(i);  // id = position
  f.val = test::pattern_tokens(100, 1000);
  f.vocab = n;
  f.token_bytes = 4;
  test::write_token_file(tmp.path(), f);
  const TokenDataset ds = TokenDataset::open(tmp.path());
  const int64_t B = 8192;
  DataLoader dl(ds, Split::kTrain, B, /*seq_len=*/1, /*seed=*/3, true, true);
  const int64_t W = dl.windows_per_epoch();
  ASSERT_GT(W, int64_t{1} << 20);
  std::vector<char> seen(static_cast<size_t>(n), 0);
  std::vector<int64_t> first_starts;
  int64_t got = 0;
  while (got < W) {
    const Batch b = dl.next();
    const int64_t* t = b.tokens.data_ptr<int64_t>();
    for (int64_t r = 0; r < B && got < W; ++r, ++got) {
      const int64_t start = t[2 * r];
      ASSERT_EQ(t[2 * r + 1], start + 1);
      ASSERT_FALSE(seen[static_cast<size_t>(start)]) << "window at " << start << " visited twice in epoch 0";
      seen[static_cast<size_t>(start)] = 1;
      if (got < 16) first_starts.push_back(start);
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), W);
  // not the identity, and epoch 1 visits in another order
  EXPECT_FALSE(std::is_sorted(first_starts.begin(), first_starts.end()));
  DataLoader next_epoch(ds, Split::kTrain, 16, 1, 3, true, false);
  next_epoch.restore(LoaderState{1, 0});
  const Batch b = next_epoch.next();
  std::vector<int64_t> second(16);
  for (int r = 0; r < 16; ++r) second[static_cast<size_t>(r)] = b.tokens[r][0].item<int64_t>();
  EXPECT_NE(second, first_starts);
}

// ---- Mixtures ----

// Two datasets whose ids tell them apart: A's in [0, 500), B's in [500, 1000) (B's val masked,
// A's not, so mixed batches carry a mask that counts all of A's targets).
struct MixtureFiles {
  TempDir tmp{"bcd-mix"};
  std::string a = tmp.file("a"), b = tmp.file("b");
  MixtureFiles() {
    test::TokenFile f;
    f.vocab = kVocab;
    f.train = test::pattern_tokens(4000, 500);  // a few hundred windows: epochs wrap within a test
    f.val = test::pattern_tokens(900, 500, 7);
    std::filesystem::create_directories(a);
    test::write_token_file(a, f);
    for (uint32_t& t : f.train) t += 500;
    f.val = test::pattern_tokens(1500, 500, 11);
    for (uint32_t& t : f.val) t += 500;
    f.train_mask = test::pattern_mask(4000);
    f.val_mask = test::pattern_mask(1500, 5);
    std::filesystem::create_directories(b);
    test::write_token_file(b, f);
  }
  std::vector<DataSource> sources(double wa, double wb) const {
    return {DataSource{TokenDataset::open(a), wa}, DataSource{TokenDataset::open(b), wb}};
  }
};

const MixtureFiles& mixture_files() {
  static std::unique_ptr<MixtureFiles> m = std::make_unique<MixtureFiles>();
  return *m;
}

// Over 2400 windows drawn 3 : 1, A's share is 0.75 within 0.04 (4 standard deviations), every
// row is a window of its own dataset, and each dataset's windows are its epoch's in order.
TEST(DataLoaderMixture, HonoursTheWeightsWithRealWindowsOfEachDataset) {
  const MixtureFiles& mf = mixture_files();
  const std::vector<DataSource> src = mf.sources(3, 1);
  const int64_t B = 4, T = 17;
  DataLoader dl(src, Split::kTrain, B, T, /*seed=*/9);
  DataLoader only_a(src[0].ds, Split::kTrain, 1, T, /*seed=*/9, true, false);
  const std::vector<int32_t> ta = src[0].ds.read_tokens(Split::kTrain), tb = src[1].ds.read_tokens(Split::kTrain);
  int64_t from_a = 0, n = 0;
  for (int i = 0; i < 600; ++i) {
    const Batch batch = dl.next();
    ASSERT_TRUE(batch.mask.defined()) << "B has a mask: the mixture's batches carry one";
    for (int64_t r = 0; r < B; ++r, ++n) {
      const int64_t* row = batch.tokens[r].data_ptr<int64_t>();
      const bool a = row[0] < 500;
      for (int64_t j = 0; j <= T; ++j) ASSERT_EQ(row[j] < 500, a) << "a row mixes datasets";
      const std::vector<int32_t>& t = a ? ta : tb;
      const auto at = std::search(t.begin(), t.end(), row, row + T + 1,
                                  [](int32_t x, int64_t y) { return static_cast<int64_t>(x) == y; });
      ASSERT_NE(at, t.end()) << "row " << n << " is no window of its dataset";
      if (a) {  // A's windows come in the order A alone (seeded the same) hands them out
        ++from_a;
        const Batch alone = only_a.next();
        EXPECT_TRUE(torch::equal(alone.tokens[0], batch.tokens[r])) << "A's window " << from_a;
        EXPECT_EQ(batch.mask[r].sum().item<float>(), static_cast<float>(T)) << "A's targets all count";
      }
    }
  }
  const double share = static_cast<double>(from_a) / static_cast<double>(n);
  EXPECT_NEAR(share, 0.75, 0.04) << from_a << " of " << n;
  // an epoch of A is ~235 windows: A wrapped to a later epoch, and the state says so
  EXPECT_GE(dl.state().epoch, 5u);
  EXPECT_GE(dl.state().more.at(0).epoch, 1u);
  EXPECT_EQ(dl.state().drawn, static_cast<uint64_t>(n));
}

// Stopping anywhere and restoring the state into a fresh loader continues the same batches,
// across epochs of both datasets, with and without prefetch and as rank 1 of 2.
TEST(DataLoaderMixture, RestoreContinuesExactly) {
  const MixtureFiles& mf = mixture_files();
  for (const auto& [rank, world] : {std::pair{0, 1}, std::pair{1, 2}}) {
    for (int stop : {0, 7, 130}) {
      SCOPED_TRACE(fmt::format("rank {} of {}, stop after {}", rank, world, stop));
      DataLoader ref(mf.sources(0.6, 0.4), Split::kTrain, 3, 17, 4, true, true, rank, world);
      for (int i = 0; i < stop; ++i) ref.next();
      const LoaderState at = ref.state();
      DataLoader resumed(mf.sources(0.6, 0.4), Split::kTrain, 3, 17, 4, true, stop % 2 == 0, rank, world);
      resumed.restore(at);
      EXPECT_EQ(resumed.state(), at);
      for (int i = 0; i < 150; ++i) {
        const Batch x = ref.next(), y = resumed.next();
        ASSERT_TRUE(torch::equal(x.tokens, y.tokens)) << "batch " << stop + i;
        ASSERT_TRUE(torch::equal(x.mask, y.mask)) << "batch " << stop + i;
        ASSERT_EQ(x.divisor, y.divisor) << "batch " << stop + i;
      }
      EXPECT_EQ(ref.state(), resumed.state());
    }
  }
}

TEST(DataLoaderMixture, ForeignStatesAndBadWeightsAreRefused) {
  const MixtureFiles& mf = mixture_files();
  DataLoader mix(mf.sources(1, 1), Split::kTrain, 2, 17, 1);
  DataLoader one(TokenDataset::open(mf.a), Split::kTrain, 2, 17, 1);
  std::string msg = test::error_of([&] { mix.restore(one.state()); });
  EXPECT_NE(msg.find("1 dataset(s), this loader mixes 2"), std::string::npos) << msg;
  msg = test::error_of([&] { one.restore(mix.state()); });
  EXPECT_NE(msg.find("2 dataset(s), this loader mixes 1"), std::string::npos) << msg;
  LoaderState past = mix.state();
  past.more[0].cursor = 100000;
  msg = test::error_of([&] { mix.restore(past); });
  EXPECT_NE(msg.find(mf.b), std::string::npos) << msg;
  msg = test::error_of([&] { DataLoader(mf.sources(1, 0), Split::kTrain, 2, 17, 1); });
  EXPECT_NE(msg.find("weight 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace bcd
