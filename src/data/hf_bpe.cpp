// The BPE model of tokenizer.json (tokenizers/src/models/bpe/{model,word}.rs): vocabulary and
// ranked merges, byte fallback, unknown tokens, subword prefix and word suffix, ignore_merges,
// and a bounded cache of the pre-tokens already encoded.
#include <fmt/format.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <queue>

#include "base/error.h"
#include "data/hf_internal.h"

namespace bcd::hf {

using nlohmann::json;

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

std::unique_ptr<Bpe> Bpe::from_json(const json& j, const Where& w) {
  Fields f(j, w, {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                  "byte_fallback", "ignore_merges", "vocab", "merges"});
  auto m = std::make_unique<Bpe>();
  if (const json* d = f.find("dropout")) {
    if (!d->is_number()) f.fail(fmt::format("\"dropout\" must be a number, found {}", d->dump()));
    if (d->get<double>() != 0.0)
      f.fail(fmt::format("dropout {} is not implemented (it makes encodings random)", d->dump()));
  }
  if (f.find("unk_token")) {
    m->has_unk_ = true;
    m->unk_token_ = f.req_string("unk_token");
  }
  if (f.find("continuing_subword_prefix")) {
    m->has_prefix_ = true;
    m->prefix_ = f.req_string("continuing_subword_prefix");
  }
  if (f.find("end_of_word_suffix")) {
    m->has_suffix_ = true;
    m->suffix_ = f.req_string("end_of_word_suffix");
  }
  // An empty prefix or suffix changes nothing.
  m->has_prefix_ = m->has_prefix_ && !m->prefix_.empty();
  m->has_suffix_ = m->has_suffix_ && !m->suffix_.empty();
  m->fuse_unk_ = f.get_bool("fuse_unk", false);
  m->byte_fallback_ = f.get_bool("byte_fallback", false);
  m->ignore_merges_ = f.get_bool("ignore_merges", false);

  // ---- Vocabulary: piece -> id, ids unique ----
  const json& vocab = f.req("vocab");
  if (!vocab.is_object()) f.fail("\"vocab\" must be an object of piece -> id");
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= INT32_MAX)
      f.fail(fmt::format("vocab entry {} has the id {}; expected an integer in [0, 2^31)", json(it.key()).dump(),
                         it->dump()));
    max_id = std::max(max_id, it->get<int64_t>());
  }
  if (vocab.empty()) f.fail("\"vocab\" is empty: a tokenizer without pieces would drop every text");
  // Ids are a vocabulary's: dense but for a few gaps. One id of 50,000,000 in a small file would
  // size a 50M-entry table by itself.
  const int64_t most = static_cast<int64_t>(vocab.size()) + kMaxVocabGap;
  if (max_id >= most)
    f.fail(fmt::format("\"vocab\" has {} pieces but the id {}; ids must stay below the number of pieces plus {} "
                       "(gaps are a few ids, not millions)",
                       vocab.size(), max_id, kMaxVocabGap));
  m->pieces_.resize(static_cast<size_t>(max_id + 1));
  m->has_piece_.assign(static_cast<size_t>(max_id + 1), false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = static_cast<size_t>(it->get<int64_t>());
    if (m->has_piece_[id])
      f.fail(fmt::format("vocab gives the id {} to both {} and {}", id, json(m->pieces_[id]).dump(),
                         json(it.key()).dump()));
    m->has_piece_[id] = true;
    m->pieces_[id] = it.key();
  }
  m->vocab_.reserve(vocab.size());
  for (size_t id = 0; id < m->pieces_.size(); ++id)
    if (m->has_piece_[id]) m->vocab_.emplace(m->pieces_[id], static_cast<int32_t>(id));
  for (int b = 0; b < 256; ++b) m->byte_ids_[b] = m->id_of(fmt::format("<0x{:02X}>", b));

  // ---- Merges: "a b" lines or [a, b] pairs; the rank is the position ----
  const json& merges = f.req("merges");
  if (!merges.is_array()) f.fail("\"merges\" must be an array");
  m->merges_.reserve(merges.size());
  std::string a, b, merged;
  uint32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    if (e.is_string()) {
      const std::string& line = e.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        f.fail(fmt::format("merge {} ({}) is not two pieces separated by one space", i, json(line).dump()));
      a = line.substr(0, sp);
      b = line.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      f.fail(fmt::format("merge {} is {}; expected \"a b\" or [\"a\", \"b\"]", i, e.dump()));
    }
    const int32_t ia = m->id_of(a), ib = m->id_of(b);
    if (ia < 0 || ib < 0) f.fail(fmt::format("merge {} names {}, which is not in the vocab", i, json(ia < 0 ? a : b).dump()));
    const size_t cut = m->has_prefix_ ? m->prefix_.size() : 0;
    if (b.size() < cut) f.fail(fmt::format("merge {}: {} is shorter than the subword prefix", i, json(b).dump()));
    merged = a + b.substr(cut);
    const int32_t id = m->id_of(merged);
    if (id < 0) f.fail(fmt::format("merge {} makes {}, which is not in the vocab", i, json(merged).dump()));
    m->merges_[pair_key(ia, ib)] = MergeValue{rank++, id};  // a repeated pair keeps its last rank
  }
  return m;
}

int32_t Bpe::id_of(std::string_view piece) const {
  auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* Bpe::piece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size() || !has_piece_[static_cast<size_t>(id)]) return nullptr;
  return &pieces_[static_cast<size_t>(id)];
}

const Bpe::MergeValue* Bpe::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void Bpe::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = id_of(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (word.size() >= kCacheMaxBytes) {
    merge_word(word, out);
    return;
  }
  CacheShard& shard = cache_[std::hash<std::string_view>{}(word) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(std::string(word));
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  merge_word(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kCacheShardEntries) shard.map.clear();
  shard.map.emplace(std::string(word), std::move(ids));
}

// BPE::merge_word and Word::merge_all: the characters (or their bytes, or unk) as a linked list
// of symbols, then the lowest-ranked mergeable pair first (leftmost among equals) until none is
// left; a queue entry whose pair has changed since it was pushed is skipped.
void Bpe::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  struct Merge {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> syms;
  syms.clear();
  auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(syms.size());
    if (n > 0) syms.back().next = n;
    syms.push_back({id, n - 1, -1, len});
  };

  int32_t unk_id = -1;
  uint32_t unk_len = 0;
  bool unk_pending = false;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    const size_t start = i;
    i += utf8_len(static_cast<unsigned char>(w[i]));
    const auto byte_len = static_cast<uint32_t>(i - start);
    std::string_view piece = w.substr(start, byte_len);
    if (has_prefix_ && start != 0) {
      s.assign(prefix_).append(piece);
      piece = s;
    }
    if (has_suffix_ && i == w.size()) {
      if (piece.data() != s.data()) s.assign(piece);
      s.append(suffix_);
      piece = s;
    }
    const int32_t id = id_of(piece);
    if (id >= 0) {
      if (unk_pending) add(unk_id, unk_len), unk_pending = false;
      add(id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : piece) all = all && byte_ids_[c] >= 0;
      if (all) {
        for (unsigned char c : piece) add(byte_ids_[c], 1);
        continue;
      }
    }
    if (has_unk_) {
      const int32_t uid = id_of(unk_token_);
      if (uid < 0) throw UserError(fmt::format("tokenizer.json: the unk_token {} is not in the vocab",
                                               nlohmann::json(unk_token_).dump()));
      if (unk_pending && fuse_unk_) {
        unk_len += byte_len;
      } else {
        if (unk_pending) add(unk_id, unk_len);
        unk_id = uid;
        unk_len = byte_len;
        unk_pending = true;
      }
    }
  }
  if (unk_pending) add(unk_id, unk_len);

  std::vector<Merge> storage;
  storage.reserve(syms.size() * 2);
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue(std::greater<Merge>(), std::move(storage));
  for (size_t k = 0; k + 1 < syms.size(); ++k)
    if (const MergeValue* mv = find_merge(syms[k].id, syms[k + 1].id))
      queue.push({mv->rank, static_cast<uint32_t>(k), mv->new_id});
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const Symbol right = syms[static_cast<size_t>(cur.next)];
    const MergeValue* mv = find_merge(cur.id, right.id);
    if (!mv || mv->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    syms[static_cast<size_t>(cur.next)].len = 0;
    cur.next = right.next;
    if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
    if (cur.prev >= 0)
      if (const MergeValue* p = find_merge(syms[static_cast<size_t>(cur.prev)].id, cur.id))
        queue.push({p->rank, static_cast<uint32_t>(cur.prev), p->new_id});
    if (cur.next >= 0)
      if (const MergeValue* n = find_merge(cur.id, syms[static_cast<size_t>(cur.next)].id))
        queue.push({n->rank, top.pos, n->new_id});
  }
  for (const Symbol& sym : syms)
    if (sym.len != 0) out.push_back(sym.id);
}

}  // namespace bcd::hf
