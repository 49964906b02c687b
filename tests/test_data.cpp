// Tests of the data side: BPE tokenizer round trip, `prepare` (document splitting, the
// train/val split, atomic output), TokenDataset validation, and the loader's determinism/resume.
// Instruction data and loss masks are in test_instruct.cpp.
#include <H5Cpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/chat.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "base/error.h"
#include "data_test_fixture.h"
#include "dataset_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using datatest::fortune_records;
using datatest::Shared;
using datatest::shared;
using datatest::shared_dataset;
using datatest::row_is_window;

// Names in `dir` other than `keep`: leftovers of a failed or replaced prepare.
std::vector<std::string> entries_except(const std::string& dir, const std::set<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (!keep.count(name)) out.push_back(name);
  }
  return out;
}

// Documents of a split as text, EOS removed (each must end with exactly one EOS).
std::vector<std::string> decode_docs(const TokenDataset& ds, const Tokenizer& tok, Split s) {
  const std::vector<int32_t> t = ds.read_tokens(s);
  const std::vector<uint64_t> off = ds.read_doc_offsets(s);
  std::vector<std::string> docs;
  for (size_t d = 0; d + 1 < off.size(); ++d) {
    EXPECT_LT(off[d], off[d + 1]);
    EXPECT_EQ(t[off[d + 1] - 1], ds.eos_id()) << split_name(s) << " doc " << d;
    std::vector<int> ids(t.begin() + off[d], t.begin() + off[d + 1] - 1);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), ds.eos_id()), 0) << split_name(s) << " doc " << d;
    docs.push_back(tok.decode(ids));
  }
  return docs;
}

// ---- Tokenizer ----

TEST(Tokenizer, BpeRoundTripsTextIncludingUnseenCharacters) {
  TempDir tmp("bcd-tok");
  std::vector<std::string> docs = fortune_records();
  const std::string model = tmp.file("m.model");
  Tokenizer::train_bpe(docs, 400, model);
  Tokenizer tok = Tokenizer::load(model);
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.path(), model);
  EXPECT_GE(tok.bos_id(), 0);
  EXPECT_GE(tok.eos_id(), 0);
  EXPECT_NE(tok.bos_id(), tok.eos_id());
  EXPECT_FALSE(fs::exists(model + ".vocab")) << "sentencepiece side files left behind";

  std::vector<std::string> samples = {docs[0],
                                      docs[1] + "\n" + docs[2],
                                      "café",
                                      "Naïve résumé — 日本語 🙂",
                                      "  two leading spaces, trailing  ",
                                      "tabs\tand\nnewlines\n\nand   runs",
                                      "digits 1234567890",
                                      "\x01 control \x7f bytes\b"};
  for (const std::string& s : samples) {
    std::vector<int> ids = tok.encode(s);
    EXPECT_FALSE(ids.empty()) << s;
    for (int id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << s;
    EXPECT_EQ(tok.decode(ids), s);
  }
  // BPE merged something: common English is shorter in tokens than in bytes
  EXPECT_LT(tok.encode(docs[0]).size(), docs[0].size());
}

TEST(Tokenizer, TrainingIsDeterministic) {
  TempDir tmp("bcd-tok");
  std::vector<std::string> docs = fortune_records();
  docs.resize(200);
  Tokenizer::train_bpe(docs, 400, tmp.file("a.model"));
  Tokenizer::train_bpe(docs, 400, tmp.file("b.model"));
  EXPECT_TRUE(test::read_text(tmp.file("a.model")) == test::read_text(tmp.file("b.model")))
      << "two trainings on the same input gave different model files";
}

TEST(Tokenizer, LongDocumentsWithoutNewlinesStillTrain) {
  // sentencepiece drops sentences over max_sentence_length; ours must be cut, not lost
  TempDir tmp("bcd-tok");
  std::string one_line;
  for (const std::string& r : fortune_records()) one_line += r + " ";
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  ASSERT_GT(one_line.size(), 20000u);
  Tokenizer::train_bpe({one_line}, 400, tmp.file("m.model"));
  Tokenizer tok = Tokenizer::load(tmp.file("m.model"));
  EXPECT_EQ(tok.decode(tok.encode(one_line)), one_line);
  // all sentences dropped would fail training or leave only byte pieces (one token per byte)
  EXPECT_LT(tok.encode(one_line).size(), one_line.size() * 3 / 4);
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  TempDir tmp("bcd-tok");
  std::string missing = tmp.file("nope.model");
  EXPECT_NE(user_error_of([&] { Tokenizer::load(missing); }).find(missing), std::string::npos);
  std::string garbage = tmp.file("garbage.model");
  test::write_text(garbage, "this is not a protobuf");
  EXPECT_NE(user_error_of([&] { Tokenizer::load(garbage); }).find(garbage), std::string::npos);
  EXPECT_NE(user_error_of([&] {
              Tokenizer::train_bpe({"a b c"}, 100, tmp.file("x.model"));
            }).find("vocab_size"),
            std::string::npos);
}

// ---- prepare ----

TEST(Prepare, SplitsDocumentsDisjointlyAndReportsCounts) {
  const Shared& s = shared();
  TokenDataset ds = TokenDataset::open(s.out_dir);
  Tokenizer tok = Tokenizer::load(ds.tokenizer_path());
  EXPECT_EQ(ds.tokenizer_path(), s.out_dir + "/tokenizer.model");

  const PrepareReport& r = s.report;
  EXPECT_EQ(r.vocab_size, 400);
  EXPECT_EQ(ds.vocab_size(), 400);
  EXPECT_EQ(ds.eos_id(), tok.eos_id());
  EXPECT_EQ(ds.bos_id(), tok.bos_id());
  EXPECT_EQ(r.n_docs_train, ds.n_docs(Split::kTrain));
  EXPECT_EQ(r.n_docs_val, ds.n_docs(Split::kVal));
  EXPECT_EQ(r.n_docs_train, static_cast<int64_t>(ds.read_doc_offsets(Split::kTrain).size()) - 1);
  EXPECT_EQ(r.n_tokens_train, ds.n_tokens(Split::kTrain));
  EXPECT_EQ(r.n_tokens_val, ds.n_tokens(Split::kVal));
  EXPECT_EQ(r.n_docs_train + r.n_docs_val, static_cast<int64_t>(s.expected_docs.size()));
  // 20% of 222 documents; a wide band since the split is by hash
  EXPECT_GT(r.n_docs_val, 20);
  EXPECT_LT(r.n_docs_val, 70);

  // Sources: the directory's plain files by name, then the explicit file.
  std::vector<std::string> names;
  for (const std::string& src : r.sources) names.push_back(fs::path(src).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"a_fortunes", "b_plain.txt", "extra.txt"}));

  // Every document lands in exactly one split, text intact.
  std::vector<std::string> train = decode_docs(ds, tok, Split::kTrain);
  std::vector<std::string> val = decode_docs(ds, tok, Split::kVal);
  std::set<std::string> train_set(train.begin(), train.end()), val_set(val.begin(), val.end());
  for (const std::string& d : val_set) EXPECT_EQ(train_set.count(d), 0u) << "in both splits: " << d;
  std::vector<std::string> all = train;
  all.insert(all.end(), val.begin(), val.end());
  std::vector<std::string> expected = s.expected_docs;
  std::sort(all.begin(), all.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);

  // Baseline loss against a recomputation from the stored tokens.
  std::vector<double> count(ds.vocab_size(), 0.0);
  for (int32_t t : ds.read_tokens(Split::kTrain)) count[t] += 1;
  double nll = 0, denom = static_cast<double>(ds.n_tokens(Split::kTrain)) + ds.vocab_size();
  for (int32_t t : ds.read_tokens(Split::kVal)) nll -= std::log((count[t] + 1) / denom);
  nll /= static_cast<double>(ds.n_tokens(Split::kVal));
  EXPECT_NEAR(r.unigram_val_loss, nll, 1e-9);
  EXPECT_NEAR(ds.unigram_val_loss(), nll, 1e-9);
  EXPECT_GT(nll, 1.0);
  EXPECT_LT(nll, std::log(400.0));

  // Root attributes and the token type, read back with plain HDF5.
  H5::H5File f(s.out_dir + "/tokens.h5", H5F_ACC_RDONLY);
  auto str_attr = [&](const char* name) {
    H5::Attribute a = f.openAttribute(name);
    std::string v;
    a.read(a.getStrType(), v);
    return v;
  };
  auto u64_attr = [&](const char* name) {
    uint64_t v = 0;
    f.openAttribute(name).read(H5::PredType::NATIVE_UINT64, &v);
    return v;
  };
  double vf = 0;
  f.openAttribute("val_fraction").read(H5::PredType::NATIVE_DOUBLE, &vf);
  EXPECT_EQ(vf, 0.2);
  EXPECT_EQ(u64_attr("seed"), 99u);
  EXPECT_EQ(u64_attr("format_version"), 1u);
  EXPECT_EQ(str_attr("tokenizer"), "tokenizer.model");
  std::string model = test::read_text(s.out_dir + "/tokenizer.model");
  EXPECT_EQ(str_attr("tokenizer_xxh64"),
            fmt::format("{:016x}", XXH64(model.data(), model.size(), 0)));
  EXPECT_EQ(str_attr("sources"), r.sources[0] + "\n" + r.sources[1] + "\n" + r.sources[2]);
  H5::DataSet tokens = f.openDataSet("/train/tokens");
  EXPECT_EQ(tokens.getDataType().getSize(), 2u) << "vocab 400 must be stored as uint16";
  EXPECT_EQ(tokens.getIntType().getSign(), H5T_SGN_NONE);
}

TEST(Prepare, RefusesExistingOutDirUnlessForced) {
  const Shared& s = shared();
  TempDir tmp("bcd-prep");
  std::string out = tmp.file("ds");
  fs::create_directories(out);
  test::write_text(out + "/marker", "old");
  PrepareOptions opt = s.opt;
  opt.out_dir = out;
  opt.tokenizer_model = s.out_dir + "/tokenizer.model";  // reuse: no second BPE training

  std::string msg = user_error_of([&] { prepare_dataset(opt); });
  EXPECT_NE(msg.find(out), std::string::npos) << msg;
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(out + "/marker"));
  EXPECT_EQ(entries_except(tmp.path(), {"ds"}), std::vector<std::string>{});

  opt.force = true;
  PrepareReport r = prepare_dataset(opt);
  EXPECT_FALSE(fs::exists(out + "/marker"));
  EXPECT_EQ(entries_except(tmp.path(), {"ds"}), std::vector<std::string>{});
  // Same inputs, seed and tokenizer: the same dataset, byte for byte in the tokens.
  TokenDataset a = TokenDataset::open(s.out_dir), b = TokenDataset::open(out);
  EXPECT_EQ(r.n_docs_val, s.report.n_docs_val);
  EXPECT_EQ(a.read_tokens(Split::kTrain), b.read_tokens(Split::kTrain));
  EXPECT_EQ(a.read_tokens(Split::kVal), b.read_tokens(Split::kVal));
  EXPECT_EQ(a.read_doc_offsets(Split::kVal), b.read_doc_offsets(Split::kVal));
  EXPECT_TRUE(test::read_text(s.out_dir + "/tokenizer.model") ==
              test::read_text(out + "/tokenizer.model"));
}

// A prepare that fails, early or after it started writing, leaves neither out_dir nor its
// temporary directory behind.
TEST(Prepare, FailureLeavesNoOutput) {
  const Shared& s = shared();
  TempDir tmp("bcd-prep");
  test::write_text(tmp.file("bad.model"), "not a sentencepiece model");
  struct Case {
    const char* name;
    std::function<void(PrepareOptions&)> edit;
    std::string expect;  // in the message
  };
  const std::string missing = tmp.file("no/such/input.txt");
  const std::vector<Case> cases = {
      {"missing input", [&](PrepareOptions& o) { o.inputs.push_back(missing); }, missing},
      {"bad tokenizer", [&](PrepareOptions& o) { o.tokenizer_model = tmp.file("bad.model"); },
       tmp.file("bad.model")},
      {"vocab too small", [&](PrepareOptions& o) { o.vocab_size = 280; }, "vocab"},
      {"bad val_fraction", [&](PrepareOptions& o) { o.val_fraction = 1.5; }, "val_fraction"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PrepareOptions opt = s.opt;
    opt.out_dir = tmp.file("ds");
    c.edit(opt);
    std::string msg = user_error_of([&] { prepare_dataset(opt); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    EXPECT_EQ(entries_except(tmp.path(), {"bad.model"}), std::vector<std::string>{});
  }
}

// ---- TokenDataset::open ----

TEST(TokenDataset, GarbageOrMissingFileNamesIt) {
  TempDir tmp("bcd-ds");
  std::string file = tmp.file("tokens.h5");
  EXPECT_NE(user_error_of([&] { TokenDataset::open(tmp.path()); }).find(file), std::string::npos);
  test::write_text(file, "definitely not HDF5\n");
  EXPECT_NE(user_error_of([&] { TokenDataset::open(tmp.path()); }).find(file), std::string::npos);
}

// Faults of structure fail at open; a bad token id fails only when a read reaches it
// (TokenDataset::BadIdsFailWhenRead).
TEST(TokenDataset, RejectsInconsistentFiles) {
  const Shared& s = shared();
  struct Case {
    const char* name;
    std::function<void(H5::H5File&)> corrupt;
    std::string expect;
  };
  auto set_i64 = [](H5::H5File& f, const char* name, int64_t v) {
    f.openAttribute(name).write(H5::PredType::NATIVE_INT64, &v);
  };
  const std::vector<Case> cases = {
      {"wrong format_version", [&](H5::H5File& f) { set_i64(f, "format_version", 99); },
       "format_version"},
      {"ids not uint16 or uint32",
       [](H5::H5File& f) {
         H5::Group g = f.openGroup("val");
         H5::DataSet d = g.openDataSet("tokens");
         hsize_t n = 0;
         d.getSpace().getSimpleExtentDims(&n);
         std::vector<int32_t> t(n);
         d.read(t.data(), H5::PredType::NATIVE_INT32);
         g.unlink("tokens");
         g.createDataSet("tokens", H5::PredType::STD_I32LE, H5::DataSpace(1, &n)).write(t.data(), H5::PredType::NATIVE_INT32);
       },
       "/val/tokens holds 4-byte integers other than little-endian uint16 or uint32"},
      {"missing offsets", [](H5::H5File& f) { f.unlink("/val/doc_offsets"); }, "doc_offsets"},
      {"missing group", [](H5::H5File& f) { f.unlink("/train"); }, "/train"},
      {"missing attribute", [](H5::H5File& f) { f.removeAttr("eos_id"); }, "eos_id"},
      {"offsets past end",
       [](H5::H5File& f) {
         H5::DataSet d = f.openDataSet("/val/doc_offsets");
         hsize_t n = 0;
         d.getSpace().getSimpleExtentDims(&n);
         std::vector<uint64_t> off(n);
         d.read(off.data(), H5::PredType::NATIVE_UINT64);
         off.back() += 5;
         d.write(off.data(), H5::PredType::NATIVE_UINT64);
       },
       "doc_offsets"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir tmp("bcd-ds");
    const std::string file = tmp.file("tokens.h5");
    fs::copy_file(s.out_dir + "/tokens.h5", file);
    {
      H5::H5File f(file, H5F_ACC_RDWR);
      c.corrupt(f);
    }
    std::string msg = user_error_of([&] { TokenDataset::open(tmp.path()); });
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
}

// Ids are checked as they are read, so a bad one fails the read or the batch that reaches it,
// named by file, split and position, and never the reads before it.
TEST(TokenDataset, BadIdsFailWhenRead) {
  const Shared& s = shared();
  {
    SCOPED_TRACE("vocab_size lowered below the ids");
    TempDir tmp("bcd-ds");
    const std::string file = tmp.file("tokens.h5");
    fs::copy_file(s.out_dir + "/tokens.h5", file);
    std::vector<int32_t> train;
    {
      H5::H5File f(file, H5F_ACC_RDWR);
      const int64_t ten = 10;
      f.openAttribute("vocab_size").write(H5::PredType::NATIVE_INT64, &ten);
      H5::DataSet d = f.openDataSet("/train/tokens");
      hsize_t n = 0;
      d.getSpace().getSimpleExtentDims(&n);
      train.resize(n);
      d.read(train.data(), H5::PredType::NATIVE_INT32);
    }
    const auto first_bad = std::find_if(train.begin(), train.end(), [](int32_t t) { return t >= 10; });
    ASSERT_NE(first_bad, train.end());
    const TokenDataset ds = TokenDataset::open(tmp.path());
    const std::string msg = user_error_of([&] { ds.read_tokens(Split::kTrain); });
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("/train/tokens[{}] = {} is outside the vocabulary [0, 10)", first_bad - train.begin(),
                                   *first_bad)),
              std::string::npos)
        << msg;
  }
  {
    SCOPED_TRACE("one id past the vocabulary");
    TempDir tmp("bcd-ds");
    const std::string file = tmp.file("tokens.h5");
    fs::copy_file(s.out_dir + "/tokens.h5", file);
    test::poke(file, "/val/tokens", 40, 403);
    const TokenDataset ds = TokenDataset::open(tmp.path());
    const std::string expect = "/val/tokens[40] = 403 is outside the vocabulary [0, 400)";
    EXPECT_EQ(ds.read_tokens(Split::kVal, 0, 40).size(), 40u);
    EXPECT_EQ(ds.read_tokens(Split::kVal, 41, 100).size(), 100u);
    std::string msg = user_error_of([&] { ds.read_tokens(Split::kVal, 30, 20); });
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    // In order, B = 2, T = 16: the first batch holds tokens [0, 33), the second [32, 65).
    for (bool prefetch : {false, true}) {
      SCOPED_TRACE(fmt::format("prefetch {}", prefetch));
      DataLoader dl(ds, Split::kVal, 2, 16, 1, /*shuffle=*/false, prefetch);
      dl.next();
      msg = user_error_of([&] { dl.next(); });
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
      EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    }
    DataLoader first(ds, Split::kVal, 2, 16, 1, /*shuffle=*/false);
    first.restore({0, 2});
    msg = user_error_of([&] { first.next(); });
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
  }
}

// ---- DataLoader ----


std::vector<torch::Tensor> take(DataLoader& dl, int n) {
  std::vector<torch::Tensor> out;
  for (int i = 0; i < n; ++i) out.push_back(dl.next().tokens);
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}


TEST(DataLoader, SameSeedSameBatchesOtherSeedDiffers) {
  const TokenDataset& ds = shared_dataset();
  DataLoader a(ds, Split::kTrain, 4, 32, 7), b(ds, Split::kTrain, 4, 32, 7, true, false);
  DataLoader c(ds, Split::kTrain, 4, 32, 8);
  auto ba = take(a, 30), bb = take(b, 30), bc = take(c, 30);
  EXPECT_EQ(ba[0].sizes(), (std::vector<int64_t>{4, 33}));
  EXPECT_EQ(ba[0].scalar_type(), torch::kInt64);
  EXPECT_TRUE(same(ba, bb)) << "prefetch must not change the batches";
  EXPECT_FALSE(same(ba, bc));
}

// One epoch (B = 1) is a permutation of all W windows at one shift; the next epoch reorders.
TEST(DataLoader, EpochVisitsEveryWindowOnce) {
  const TokenDataset& ds = shared_dataset();
  const std::vector<int32_t> tokens = ds.read_tokens(Split::kTrain);
  const int64_t T = 32, n = static_cast<int64_t>(tokens.size());
  DataLoader dl(ds, Split::kTrain, 1, T, 3);
  const int64_t W = dl.windows_per_epoch();
  EXPECT_EQ(W, (n - std::min(T, n - T)) / T);
  for (int epoch = 0; epoch < 2; ++epoch) {
    SCOPED_TRACE(fmt::format("epoch {}", epoch));
    auto batches = take(dl, static_cast<int>(W));
    EXPECT_EQ(dl.state(), (LoaderState{static_cast<uint64_t>(epoch) + 1, 0}));
    bool found = false;
    for (int64_t shift = 0; shift < T && !found; ++shift) {
      std::vector<int64_t> ks;
      for (const auto& b : batches) {
        int64_t k = 0;
        while (k < W && !row_is_window(b, 0, tokens, shift + k * T)) ++k;
        ks.push_back(k);
      }
      std::vector<int64_t> sorted = ks;
      std::sort(sorted.begin(), sorted.end());
      bool permutation = true;
      for (int64_t i = 0; i < W; ++i) permutation &= sorted[i] == i;
      bool in_order = std::is_sorted(ks.begin(), ks.end());
      if (permutation) {
        found = true;
        EXPECT_FALSE(in_order) << "shuffled epoch came out in order";
      }
    }
    EXPECT_TRUE(found) << "epoch is not a permutation of the windows at any shift";
  }
}

// Save the state after `skip` batches, keep going; a fresh loader restored to that state (and
// the same loader rewound) must give exactly the batches of the uninterrupted run.
class DataLoaderResume : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(DataLoaderResume, RestoreContinuesExactly) {
  const auto [prefetch, skip] = GetParam();
  const TokenDataset& ds = shared_dataset();
  const int64_t B = 7, T = 64;
  DataLoader ref(ds, Split::kTrain, B, T, 11, true, prefetch);
  const int64_t W = ref.windows_per_epoch();
  const int more = static_cast<int>(2 * W / B + 3);  // crosses at least two epoch boundaries
  take(ref, skip);
  const LoaderState saved = ref.state();
  EXPECT_EQ(saved.epoch * W + saved.cursor, static_cast<uint64_t>(skip * B));
  auto expected = take(ref, more);
  EXPECT_GE(ref.state().epoch, saved.epoch + 2);

  DataLoader fresh(ds, Split::kTrain, B, T, 11, true, !prefetch);
  fresh.restore(saved);
  EXPECT_EQ(fresh.state(), saved);
  EXPECT_TRUE(same(take(fresh, more), expected));

  ref.restore(saved);  // drops the batch prefetched past the end
  EXPECT_TRUE(same(take(ref, more), expected));
}

INSTANTIATE_TEST_SUITE_P(PrefetchAndSkip, DataLoaderResume,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0, 1, 5, 9)),
                         [](const auto& info) {
                           return fmt::format("prefetch{}_skip{}", std::get<0>(info.param) ? 1 : 0,
                                              std::get<1>(info.param));
                         });

TEST(DataLoader, ValidationIsInOrderAndCoversWindows) {
  const TokenDataset& ds = shared_dataset();
  const std::vector<int32_t> tokens = ds.read_tokens(Split::kVal);
  const int64_t B = 3, T = 16, n = static_cast<int64_t>(tokens.size());
  DataLoader dl(ds, Split::kVal, B, T, 5, /*shuffle=*/false);
  const int64_t W = dl.windows_per_epoch();
  EXPECT_EQ(W, (n - 1) / T);
  int64_t k = 0;
  for (int i = 0; i < (W + 2 * B) / B + 1; ++i) {
    torch::Tensor b = dl.next().tokens;
    for (int64_t r = 0; r < B; ++r, ++k) {
      EXPECT_TRUE(row_is_window(b, r, tokens, (k % W) * T)) << "window " << k;
    }
  }
  EXPECT_EQ(dl.state(), (LoaderState{static_cast<uint64_t>(k / W), static_cast<uint64_t>(k % W)}));
}

TEST(DataLoader, SplitShorterThanOneWindowNamesTheTokenCount) {
  const TokenDataset& ds = shared_dataset();
  const int64_t n = ds.n_tokens(Split::kVal);
  std::string msg = user_error_of([&] { DataLoader(ds, Split::kVal, 2, n, 1); });
  EXPECT_NE(msg.find(std::to_string(n)), std::string::npos) << msg;
  EXPECT_NE(msg.find("val"), std::string::npos) << msg;
  DataLoader ok(ds, Split::kVal, 2, n - 1, 1);  // exactly T + 1 tokens: one window
  EXPECT_EQ(ok.windows_per_epoch(), 1);
  EXPECT_TRUE(row_is_window(ok.next().tokens, 1, ds.read_tokens(Split::kVal), 0));
}

TEST(DataLoader, RestoreRejectsForeignState) {
  DataLoader dl(shared_dataset(), Split::kTrain, 2, 32, 1);
  LoaderState bad{0, static_cast<uint64_t>(dl.windows_per_epoch()) + 5};
  EXPECT_NE(user_error_of([&] { dl.restore(bad); }).find("cursor"), std::string::npos);
}

}  // namespace
}  // namespace bcd
