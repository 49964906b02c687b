// The tokenizer.json tokenizer: loading the file, the added vocabulary (tokenizer/
// added_vocabulary.rs: tokens split out of the raw text, then out of the normalized text), and
// the pipeline normalize -> pre-tokenize -> BPE -> post-process, and decoding.
#include "data/hf_tokenizer.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "base/error.h"
#include "base/json_read.h"
#include "base/printable.h"
#include "data/hf_internal.h"

namespace bcd {

namespace hf {

using nlohmann::json;

// ---- Added vocabulary ----

// Leftmost-longest matching of the added tokens (daachorse's MatchKind::LeftmostLongest): a
// byte trie walked from each position, the first position with a match wins, its longest.
class TokenTrie {
 public:
  void add(const std::string& s, int32_t token) {
    int32_t node = 0;
    for (unsigned char c : s) {
      int32_t next = child(node, c);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        nodes_[static_cast<size_t>(node)].children.emplace_back(c, next);
        if (node == 0) root_[c] = next;
      }
      node = next;
    }
    nodes_[static_cast<size_t>(node)].token = token;
  }
  bool empty() const { return nodes_.size() == 1; }
  // The longest token starting at s[at]: its index and length, or -1.
  int32_t longest_at(std::string_view s, size_t at, size_t* len) const {
    int32_t best = -1;
    int32_t node = root_[static_cast<unsigned char>(s[at])];
    for (size_t i = at + 1; node >= 0; ++i) {
      if (nodes_[static_cast<size_t>(node)].token >= 0) {
        best = nodes_[static_cast<size_t>(node)].token;
        *len = i - at;
      }
      if (i >= s.size()) break;
      node = child(node, static_cast<unsigned char>(s[i]));
    }
    return best;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t token = -1;
  };
  int32_t child(int32_t node, unsigned char c) const {
    if (node == 0) return root_[c];
    for (const auto& ch : nodes_[static_cast<size_t>(node)].children)
      if (ch.first == c) return ch.second;
    return -1;
  }
  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<int32_t, 256> root_ = [] {
    std::array<int32_t, 256> r;
    r.fill(-1);
    return r;
  }();
};

struct Segment {
  size_t start, end;
  int32_t token;  // index into added_, or -1 for text
};

struct Impl {
  std::string path;
  std::optional<Normalizer> normalizer;
  std::optional<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Bpe> model;
  std::optional<PostProcessor> post_processor;
  std::optional<Decoder> decoder;

  std::vector<HfTokenizer::AddedToken> added;
  std::vector<std::string> added_decoded;  // what decode writes for each (normalized content)
  std::unordered_map<std::string, size_t> added_by_content;
  std::unordered_map<int32_t, size_t> added_by_id;
  std::unordered_set<std::string> special_contents;
  TokenTrie raw_trie, normalized_trie;
  int32_t vocab_size = 0;

  // Rust regex \w of the single_word check (UTS #18 word characters).
  Regex word_char{R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", Regex::Dialect::kPcre2};

  void find_added(std::string_view s, const TokenTrie& trie, std::vector<Segment>& out) const;
  void encode_text(std::string_view s, bool at_origin, std::vector<int32_t>& ids) const;
};

// AddedVocabulary::find_matches: the text cut around each added token found; single_word
// tokens only between non-word characters; lstrip/rstrip tokens take the whitespace beside them.
void Impl::find_added(std::string_view s, const TokenTrie& trie, std::vector<Segment>& out) const {
  out.clear();
  if (trie.empty() || s.empty()) {
    out.push_back({0, s.size(), -1});
    return;
  }
  size_t start_offset = 0;
  for (size_t at = 0; at < s.size();) {
    size_t len = 0;
    const int32_t t = trie.longest_at(s, at, &len);
    if (t < 0) {
      ++at;
      continue;
    }
    const HfTokenizer::AddedToken& tok = added[static_cast<size_t>(t)];
    size_t start = at, stop = at + len;
    at = stop;  // the next search starts after this match, kept or not
    if (tok.single_word) {
      bool word_before = false, word_after = false;
      if (start > 0) {
        size_t b = start - 1;
        while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        word_before = word_char.matches_at(s, b);
      }
      if (stop < s.size()) word_after = word_char.matches_at(s, stop);
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t b = start;
      while (b > 0) {
        size_t p = b - 1;
        while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        size_t i = p;
        if (!is_whitespace(utf8_next(s, i))) break;
        b = p;
      }
      start = std::max(b, start_offset);
    }
    if (tok.rstrip) {
      size_t i = stop;
      while (i < s.size()) {
        size_t n = i;
        if (!is_whitespace(utf8_next(s, n))) break;
        i = n;
      }
      stop = i;  // the search goes on from the token's own end, as the reference's iterator does
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t});
    start_offset = stop;
  }
  if (start_offset != s.size()) out.push_back({start_offset, s.size(), -1});
}

// One piece of raw text between non-normalized added tokens: normalize, split out the
// normalized added tokens, pre-tokenize, run the model.
void Impl::encode_text(std::string_view raw, bool at_origin, std::vector<int32_t>& ids) const {
  std::string text(raw);
  if (normalizer) normalizer->apply(text, at_origin);
  std::vector<Segment> local;
  find_added(text, normalized_trie, local);
  std::vector<PreToken> pieces;
  for (const Segment& seg : local) {
    if (seg.start == seg.end) continue;
    if (seg.token >= 0) {
      ids.push_back(added[static_cast<size_t>(seg.token)].id);
      continue;
    }
    pieces.clear();
    pieces.push_back({text.substr(seg.start, seg.end - seg.start), at_origin && seg.start == 0});
    if (pre_tokenizer) pre_tokenizer->apply(pieces);
    for (const PreToken& p : pieces) model->encode(p.text, ids);
  }
}

// ---- Loading ----

namespace {

json read_json(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) user_error("tokenizer file {} is a directory; expected tokenizer.json", path);
  try {
    return read_json_file(path, kJsonTokenizer, "tokenizer file");
  } catch (const json::parse_error& e) {
    user_error("tokenizer file {} is not valid JSON: {}", path, e.what());
  }
}

}  // namespace

}  // namespace hf

using hf::json;

HfTokenizer::HfTokenizer() : impl_(std::make_unique<hf::Impl>()) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

HfTokenizer HfTokenizer::load(const std::string& path) {
  const json j = hf::read_json(path);
  HfTokenizer t;
  hf::Impl& m = *t.impl_;
  m.path = path;
  const hf::Where top{path, ""};
  hf::Fields f(j, top, {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "model",
                        "decoder", "post_processor"});
  if (const json* v = f.find("version"); v && *v != "1.0")
    f.fail(fmt::format("unknown version {} (expected \"1.0\")", v->dump()));

  // ---- Components ----
  if (const json* n = f.find("normalizer")) m.normalizer = hf::Normalizer::from_json(*n, top.at("normalizer"));
  if (const json* p = f.find("pre_tokenizer")) m.pre_tokenizer = hf::PreTokenizer::from_json(*p, top.at("pre_tokenizer"));
  if (const json* p = f.find("post_processor"))
    m.post_processor = hf::PostProcessor::from_json(*p, top.at("post_processor"));
  if (const json* d = f.find("decoder")) m.decoder = hf::Decoder::from_json(*d, top.at("decoder"));
  const json& model = f.req("model");
  const std::string type = model.is_object() && model.contains("type") && model["type"].is_string()
                               ? model["type"].get<std::string>()
                               : "";
  if (type != "BPE")
    hf::load_error(top.at("model"), type.empty() ? "the model has no \"type\" (only BPE is implemented)"
                                                 : fmt::format("the model \"{}\" is not implemented (only BPE is)", type));
  m.model = hf::Bpe::from_json(model, {path, "model (BPE)"});

  // ---- Added tokens: ids as the reference assigns them (AddedVocabulary::add_tokens) ----
  // A content already known keeps its id (the model's, or an earlier added token's); a new one
  // takes the next id after the model's vocabulary.
  int32_t next_id = static_cast<int32_t>(m.model->size());
  if (const json* list = f.find("added_tokens")) {
    if (!list->is_array()) f.fail("\"added_tokens\" must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
      const hf::Where w = top.at("added_tokens").at(i);
      hf::Fields af((*list)[i], w, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
      AddedToken a{};
      a.content = af.req_string("content");
      a.special = af.get_bool("special", false);
      a.normalized = af.get_bool("normalized", !a.special);
      a.lstrip = af.get_bool("lstrip", false);
      a.rstrip = af.get_bool("rstrip", false);
      a.single_word = af.get_bool("single_word", false);
      const int64_t file_id = af.get_int("id", -1);
      if (a.content.empty()) continue;
      if (auto it = m.added_by_content.find(a.content); it != m.added_by_content.end()) {
        a.id = m.added[it->second].id;  // a repeated content: the later entry replaces the earlier
        m.added[it->second] = a;
        continue;
      }
      const int32_t known = m.model->id_of(a.content);
      a.id = known >= 0 ? known : next_id++;
      // The id is assigned as transformers assigns it (the file's is not read back); where the
      // file says another one, the ids this tokenizer writes are not the ones the file promises.
      if (file_id >= 0 && file_id != a.id)
        fmt::print(stderr, "bcdtrain: warning: {}: added token {} has the id {} in the file but takes the id {} "
                           "(the model's piece, or the next id after the vocabulary, as transformers assigns it)\n",
                   path, printable_line(json(a.content).dump()), file_id, a.id);
      m.added_by_content.emplace(a.content, m.added.size());
      m.added.push_back(a);
    }
  }
  for (size_t k = 0; k < m.added.size(); ++k) {
    const AddedToken& a = m.added[k];
    std::string decoded = a.content;
    if (a.normalized && m.normalizer) {
      bool at_origin = true;
      m.normalizer->apply(decoded, at_origin);
    }
    if (a.special) m.special_contents.insert(a.content);
    (a.normalized ? m.normalized_trie : m.raw_trie).add(decoded, static_cast<int32_t>(k));
    m.added_decoded.push_back(decoded);
    m.added_by_id[a.id] = k;  // a later token with the same id wins, as in added_tokens_map_r
  }
  m.vocab_size = m.model->max_id() + 1;
  for (const AddedToken& a : m.added) m.vocab_size = std::max(m.vocab_size, a.id + 1);
  return t;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special) const {
  const hf::Impl& m = *impl_;
  if (const size_t bad = utf8_invalid_at(text); bad != std::string_view::npos)
    user_error("cannot tokenize with {}: the text is not valid UTF-8 (byte {} of {})", m.path, bad, text.size());
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<hf::Segment> segments;
  m.find_added(text, m.raw_trie, segments);
  for (const hf::Segment& seg : segments) {
    if (seg.start == seg.end) continue;
    if (seg.token >= 0) ids.push_back(m.added[static_cast<size_t>(seg.token)].id);
    else m.encode_text(text.substr(seg.start, seg.end - seg.start), seg.start == 0, ids);
  }
  if (add_special && m.post_processor) m.post_processor->apply(ids);
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const hf::Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= m.vocab_size)
      user_error("cannot decode with {}: the id {} is outside the vocabulary [0, {})", m.path, id, m.vocab_size);
    const std::string* piece = nullptr;
    if (auto it = m.added_by_id.find(id); it != m.added_by_id.end()) piece = &m.added_decoded[it->second];
    else piece = m.model->piece(id);
    if (!piece) continue;
    if (skip_special && m.special_contents.count(*piece)) continue;
    tokens.push_back(*piece);
  }
  if (!m.decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  m.decoder->apply(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

int32_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }

std::string HfTokenizer::piece(int32_t id, bool* found) const {
  const hf::Impl& m = *impl_;
  const std::string* p = nullptr;
  if (auto it = m.added_by_id.find(id); it != m.added_by_id.end()) p = &m.added_decoded[it->second];
  else p = m.model->piece(id);
  if (found) *found = p != nullptr;
  return p ? *p : std::string();
}

int32_t HfTokenizer::id_of(std::string_view piece) const {
  const hf::Impl& m = *impl_;
  if (auto it = m.added_by_content.find(std::string(piece)); it != m.added_by_content.end()) return m.added[it->second].id;
  return m.model->id_of(piece);
}

const std::vector<HfTokenizer::AddedToken>& HfTokenizer::added_tokens() const { return impl_->added; }
const std::string& HfTokenizer::path() const { return impl_->path; }

}  // namespace bcd
