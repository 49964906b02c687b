// Tests of instruction data on the data side: `prepare` on .jsonl records (one document per
// record, a loss mask over the responses, bad lines), masked batches and their global count, and
// bad loss masks.
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

// ---- Instruction data ----

// prepare on .jsonl records: one document per record laid out by the template, the loss mask
// counting exactly the tokens of each response and its end marker (what tokenize_chat marks),
// a bad line named by file:line or counted with skip_bad, and plain text beside it counting whole.
TEST(Prepare, InstructionRecordsStoreAMaskOverTheResponses) {
  const Shared& s = shared();
  const std::vector<std::string> recs = fortune_records();
  TempDir tmp("bcd-inst");
  std::string jsonl;
  std::vector<ChatRecord> records;
  for (size_t i = 0; i + 1 < 120; i += 2) {
    nlohmann::json j = {{"prompt", recs[i]}, {"response", recs[i + 1]}};
    jsonl += j.dump() + "\n";
    records.push_back(ChatRecord{{{"user", recs[i]}, {"assistant", recs[i + 1]}}});
  }
  const std::string file = tmp.file("chat.jsonl");
  test::write_text(file, jsonl);

  PrepareOptions opt;
  opt.inputs = {file};
  opt.out_dir = tmp.file("ds");
  opt.tokenizer_model = s.out_dir + "/tokenizer.model";
  opt.chat_template = "chatml";
  opt.val_fraction = 0.2;
  const PrepareReport r = prepare_dataset(opt);
  EXPECT_TRUE(r.instruct);
  EXPECT_EQ(r.n_docs_train + r.n_docs_val, static_cast<int64_t>(records.size()));
  const TokenDataset ds = TokenDataset::open(opt.out_dir);
  ASSERT_TRUE(ds.masked());
  const Tokenizer tok = Tokenizer::load(ds.tokenizer_path());
  // Every stored document is one record's tokenize_chat, mask included.
  std::map<std::vector<int>, std::vector<uint8_t>> want;
  for (const ChatRecord& rec : records) {
    MaskedTokens m = tokenize_chat(render_chat(rec, ChatTemplate::kChatML), tok);
    want[m.ids] = m.target;
  }
  int64_t targets = 0;
  for (Split sp : {Split::kTrain, Split::kVal}) {
    const std::vector<int32_t> t = ds.read_tokens(sp);
    const std::vector<uint8_t> m = ds.read_mask(sp);
    const std::vector<uint64_t> off = ds.read_doc_offsets(sp);
    for (size_t d = 0; d + 1 < off.size(); ++d) {
      std::vector<int> ids(t.begin() + off[d], t.begin() + off[d + 1]);
      std::vector<uint8_t> mask(m.begin() + off[d], m.begin() + off[d + 1]);
      auto it = want.find(ids);
      ASSERT_NE(it, want.end()) << split_name(sp) << " doc " << d;
      EXPECT_EQ(mask, it->second) << split_name(sp) << " doc " << d;
      EXPECT_EQ(ids.back(), ds.eos_id());
      EXPECT_EQ(mask.back(), 1);  // the EOS after the answer is learned: the model stops
      targets += std::count(mask.begin(), mask.end(), uint8_t{1});
    }
    EXPECT_EQ(sp == Split::kTrain ? r.n_targets_train : r.n_targets_val, std::count(m.begin(), m.end(), uint8_t{1}));
  }
  EXPECT_EQ(targets, r.n_targets_train + r.n_targets_val);
  EXPECT_LT(targets, r.n_tokens_train + r.n_tokens_val);  // prompts are not targets

  // The split follows the records' content, not their layout: another template holds out the
  // same records.
  auto held_out = [&](const std::string& dir, ChatTemplate t) {
    std::map<std::vector<int>, size_t> index;
    for (size_t i = 0; i < records.size(); ++i) index[tokenize_chat(render_chat(records[i], t), tok).ids] = i;
    const TokenDataset d = TokenDataset::open(dir);
    std::set<size_t> out;
    const std::vector<int32_t> t_ = d.read_tokens(Split::kVal);
    const std::vector<uint64_t> off = d.read_doc_offsets(Split::kVal);
    for (size_t k = 0; k + 1 < off.size(); ++k) out.insert(index.at(std::vector<int>(t_.begin() + off[k], t_.begin() + off[k + 1])));
    return out;
  };
  const std::set<size_t> val_chatml = held_out(opt.out_dir, ChatTemplate::kChatML);
  opt.chat_template = "llama2";
  opt.out_dir = tmp.file("llama2");
  prepare_dataset(opt);
  EXPECT_EQ(held_out(opt.out_dir, ChatTemplate::kLlama2), val_chatml);
  EXPECT_FALSE(val_chatml.empty());
  opt.chat_template = "chatml";

  // Plain text beside the records: its documents count whole.
  opt.inputs = {file, s.extra_file};
  opt.out_dir = tmp.file("mixed");
  const PrepareReport mixed = prepare_dataset(opt);
  const TokenDataset mds = TokenDataset::open(opt.out_dir);
  EXPECT_EQ(mixed.n_targets_train + mixed.n_targets_val - targets, mixed.n_tokens_train + mixed.n_tokens_val - r.n_tokens_train - r.n_tokens_val);

  // A bad record: refused naming file:line, nothing written; or counted and skipped.
  test::write_text(file, jsonl + "{\"prompt\": \"no response\"}\n" + jsonl.substr(0, jsonl.find('\n') + 1));
  opt.inputs = {file};
  opt.out_dir = tmp.file("bad");
  const std::string msg = user_error_of([&] { prepare_dataset(opt); });
  EXPECT_NE(msg.find(file + ":" + std::to_string(records.size() + 1)), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(opt.out_dir));
  opt.skip_bad = true;
  const PrepareReport skipped = prepare_dataset(opt);
  EXPECT_EQ(skipped.n_bad_records, 1);
  EXPECT_EQ(skipped.n_docs_train + skipped.n_docs_val, static_cast<int64_t>(records.size()) + 1);
  // An unknown template is named with the ones there are.
  opt.chat_template = "vicuna";
  opt.out_dir = tmp.file("tmpl");
  const std::string tmsg = user_error_of([&] { prepare_dataset(opt); });
  EXPECT_NE(tmsg.find("vicuna"), std::string::npos) << tmsg;
  EXPECT_NE(tmsg.find("chatml"), std::string::npos) << tmsg;
}

// The same conversations written in every form users bring (prompt/response or messages,
// Alpaca, ShareGPT, LIMA) prepare to the same token ids and loss masks, split alike; prepare
// states each file's form; a record of another form in a file is a bad record naming its line
// and both forms.
TEST(Prepare, EveryRecordFormPreparesToTheSameIdsAndMasks) {
  const Shared& s = shared();
  const std::vector<std::string> recs = fortune_records();
  TempDir tmp("bcd-forms");
  using nlohmann::json;
  std::map<std::string, std::string> files;  // form -> JSONL text
  for (size_t i = 0; i + 4 < 160; i += 4) {
    // System prompt on every other record; a second turn on every fourth.
    const bool sys = i % 8 == 0, two = i % 16 == 0;
    const std::string system = sys ? "Answer as a fortune would." : "";
    std::vector<std::pair<std::string, std::string>> turns = {{recs[i], recs[i + 1]}};
    if (two) turns.push_back({recs[i + 2], recs[i + 3]});
    json messages = json::array(), sharegpt = json::array(), lima = json::array();
    if (sys) messages.push_back({{"role", "system"}, {"content", system}});
    for (const auto& [u, a] : turns) {
      messages.push_back({{"role", "user"}, {"content", u}});
      messages.push_back({{"role", "assistant"}, {"content", a}});
      sharegpt.push_back({{"from", "human"}, {"value", u}});
      sharegpt.push_back({{"from", "gpt"}, {"value", a}});
      lima.push_back(u);
      lima.push_back(a);
    }
    json m = {{"messages", messages}};
    json share = {{"conversations", sharegpt}, {"id", i}};
    json conv = {{"conversations", lima}, {"source", "fortunes"}};
    // Alpaca: the last turn's question split into instruction and input at its first line break
    // (joined back with "\n", as LLaMA-Factory joins them); earlier turns as history.
    const std::string& q = turns.back().first;
    const size_t nl = q.find('\n');
    json alpaca = {{"instruction", nl == std::string::npos ? q : q.substr(0, nl)},
                   {"input", nl == std::string::npos ? "" : q.substr(nl + 1)},
                   {"output", turns.back().second}};
    if (two) alpaca["history"] = json::array({json::array({turns[0].first, turns[0].second})});
    if (sys) share["system"] = system, conv["system"] = system, alpaca["system"] = system;
    files["messages"] += m.dump() + "\n";
    files["sharegpt"] += share.dump() + "\n";
    files["conversations"] += conv.dump() + "\n";
    files["alpaca"] += alpaca.dump() + "\n";
  }
  const std::map<std::string, std::string> stated = {
      {"messages", "messages"}, {"sharegpt", "ShareGPT"}, {"conversations", "LIMA conversations"}, {"alpaca", "Alpaca"}};
  auto prepare = [&](const std::string& form) {
    PrepareOptions opt;
    opt.inputs = {tmp.file(form + ".jsonl")};
    test::write_text(opt.inputs[0], files.at(form));
    opt.out_dir = tmp.file(form);
    opt.tokenizer_model = s.out_dir + "/tokenizer.model";
    opt.chat_template = "llama3";
    opt.val_fraction = 0.2;
    const PrepareReport r = prepare_dataset(opt);
    EXPECT_TRUE(r.instruct) << form;
    EXPECT_EQ(r.record_forms, stated.at(form));
    return TokenDataset::open(opt.out_dir);
  };
  const TokenDataset want = prepare("messages");
  ASSERT_GT(want.read_tokens(Split::kVal).size(), 0u);
  for (const char* form : {"sharegpt", "conversations", "alpaca"}) {
    SCOPED_TRACE(form);
    const TokenDataset got = prepare(form);
    for (Split sp : {Split::kTrain, Split::kVal}) {
      EXPECT_EQ(got.read_tokens(sp), want.read_tokens(sp)) << split_name(sp);
      EXPECT_EQ(got.read_mask(sp), want.read_mask(sp)) << split_name(sp);
      EXPECT_EQ(got.read_doc_offsets(sp), want.read_doc_offsets(sp)) << split_name(sp);
    }
  }

  // Another form in the same file: refused naming the line and both forms, nothing written; with
  // --skip-bad, counted.
  const std::string mixed = tmp.file("mixed.jsonl");
  test::write_text(mixed, files.at("alpaca") + files.at("sharegpt").substr(0, files.at("sharegpt").find('\n') + 1));
  PrepareOptions opt;
  opt.inputs = {mixed};
  opt.out_dir = tmp.file("mixed");
  opt.tokenizer_model = s.out_dir + "/tokenizer.model";
  const std::string msg = user_error_of([&] { prepare_dataset(opt); });
  const size_t n_alpaca = static_cast<size_t>(std::count(files.at("alpaca").begin(), files.at("alpaca").end(), '\n'));
  EXPECT_NE(msg.find(mixed + ":" + std::to_string(n_alpaca + 1) + ": "), std::string::npos) << msg;
  EXPECT_NE(msg.find("ShareGPT form"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Alpaca form (its first record, line 1)"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(opt.out_dir));
  opt.skip_bad = true;
  const PrepareReport skipped = prepare_dataset(opt);
  EXPECT_EQ(skipped.n_bad_records, 1);
  EXPECT_EQ(skipped.record_forms, "Alpaca");
}

// ---- Loss masks (instruction data) ----

// The shared dataset with a loss mask added to both splits: token i counts when (i * 7) % 5 < 2.
std::vector<uint8_t> add_mask(const std::string& file, const char* split, hsize_t n) {
  std::vector<uint8_t> mask(n);
  for (hsize_t i = 0; i < n; ++i) mask[i] = (i * 7) % 5 < 2;
  H5::H5File f(file, H5F_ACC_RDWR);
  f.openGroup(split).createDataSet("loss_mask", H5::PredType::STD_U8LE, H5::DataSpace(1, &n))
      .write(mask.data(), H5::PredType::NATIVE_UINT8);
  return mask;
}

TEST(DataLoader, MaskedBatchesCarryTheirTargetsMaskAndTheGlobalCount) {
  TempDir tmp("bcd-mask");
  fs::copy_file(shared().out_dir + "/tokens.h5", tmp.file("tokens.h5"));
  const TokenDataset& plain = shared_dataset();
  add_mask(tmp.file("tokens.h5"), "train", plain.n_tokens(Split::kTrain));
  const std::vector<uint8_t> val_mask = add_mask(tmp.file("tokens.h5"), "val", plain.n_tokens(Split::kVal));
  const TokenDataset ds = TokenDataset::open(tmp.path());
  ASSERT_TRUE(ds.masked());
  EXPECT_FALSE(plain.masked());
  EXPECT_EQ(ds.read_mask(Split::kVal), val_mask);
  const std::vector<int32_t> val_tokens = ds.read_tokens(Split::kVal);

  // In order (no shuffle), rank r of 2 holds windows [2Bi + rB, 2Bi + rB + B) of step i.
  const int64_t B = 2, T = 16;
  DataLoader r0(ds, Split::kVal, B, T, 5, /*shuffle=*/false, /*prefetch=*/true, 0, 2);
  DataLoader r1(ds, Split::kVal, B, T, 5, /*shuffle=*/false, /*prefetch=*/false, 1, 2);
  int64_t k = 0;
  for (int step = 0; step < 3; ++step) {
    const Batch b0 = r0.next(), b1 = r1.next();
    double counted = 0;
    for (const Batch* b : {&b0, &b1}) {
      ASSERT_EQ(b->mask.sizes(), (std::vector<int64_t>{B, T}));
      for (int64_t r = 0; r < B; ++r, ++k) {
        const int64_t start = k * T;
        ASSERT_TRUE(row_is_window(b->tokens, r, val_tokens, start));
        for (int64_t t = 0; t < T; ++t)
          EXPECT_EQ(b->mask[r][t].item<float>(), val_mask[static_cast<size_t>(start + t + 1)]) << k << " " << t;
      }
      counted += b->mask.sum().item<double>();
    }
    EXPECT_EQ(b0.divisor, counted / 2);
    EXPECT_EQ(b1.divisor, counted / 2);
  }
  // Plain text: no mask, the divisor is B * T.
  DataLoader p(plain, Split::kVal, B, T, 5, false);
  const Batch pb = p.next();
  EXPECT_FALSE(pb.mask.defined());
  EXPECT_EQ(pb.divisor, B * T);
}

TEST(TokenDataset, RejectsBadLossMasks) {
  const TokenDataset& plain = shared_dataset();
  const auto n_train = static_cast<hsize_t>(plain.n_tokens(Split::kTrain)), n_val = static_cast<hsize_t>(plain.n_tokens(Split::kVal));
  struct Case {
    const char* name;
    std::function<void(const std::string&)> corrupt;
    std::string expect;
  };
  auto write = [](const std::string& file, const char* split, std::vector<uint8_t> m) {
    H5::H5File f(file, H5F_ACC_RDWR);
    hsize_t n = m.size();
    f.openGroup(split).createDataSet("loss_mask", H5::PredType::STD_U8LE, H5::DataSpace(1, &n))
        .write(m.data(), H5::PredType::NATIVE_UINT8);
  };
  const std::vector<Case> cases = {
      {"one split only", [&](const std::string& f) { add_mask(f, "train", n_train); }, "/val/loss_mask is missing"},
      {"wrong length", [&](const std::string& f) { add_mask(f, "train", n_train); write(f, "val", std::vector<uint8_t>(n_val - 1, 1)); },
       "one per token"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir tmp("bcd-mask");
    const std::string file = tmp.file("tokens.h5");
    fs::copy_file(shared().out_dir + "/tokens.h5", file);
    c.corrupt(file);
    std::string msg = user_error_of([&] { TokenDataset::open(tmp.path()); });
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }

  // A value other than 0 or 1 fails the read that reaches it, and the batch of every rank: a
  // rank counts the targets of all ranks' windows.
  SCOPED_TRACE("not 0 or 1");
  TempDir tmp("bcd-mask");
  const std::string file = tmp.file("tokens.h5");
  fs::copy_file(shared().out_dir + "/tokens.h5", file);
  add_mask(file, "train", n_train);
  std::vector<uint8_t> m(n_val, 1);
  m[3] = 2;
  write(file, "val", m);
  const TokenDataset ds = TokenDataset::open(tmp.path());
  uint8_t head[3];
  ds.read_mask(Split::kVal, 0, 3, head);
  std::string msg = user_error_of([&] { ds.read_mask(Split::kVal); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("/val/loss_mask[3] = 2, expected 0 or 1"), std::string::npos) << msg;
  DataLoader rank1(ds, Split::kVal, 1, 16, 1, /*shuffle=*/false, /*prefetch=*/true, 1, 2);  // window 0 is rank 0's
  msg = user_error_of([&] { rank1.next(); });
  EXPECT_NE(msg.find("/val/loss_mask[3] = 2"), std::string::npos) << msg;
}

}  // namespace
}  // namespace bcd
