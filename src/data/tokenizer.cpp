// Tokenizer glue over sentencepiece: loading a model file and training a byte-fallback BPE
// model from in-memory documents (Llama-style settings, so every UTF-8 string round-trips).
#include "data/tokenizer.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <new>
#include <string_view>
#include <system_error>
#include <unordered_map>

#include "base/bytes.h"
#include "base/error.h"
#include "base/files.h"
#include "data/hf_tokenizer.h"

namespace bcd {

namespace {

namespace fs = std::filesystem;

// sentencepiece skips (with only a log line) training sentences longer than max_sentence_length;
// we cut long lines into pieces of at most this many bytes instead, so nothing is lost.
constexpr size_t kMaxSentenceBytes = 8192;
// Cuts `line` into pieces of at most kMaxSentenceBytes, preferring the last space before the
// limit and never splitting a UTF-8 sequence.
void append_chunks(std::string_view line, std::vector<std::string_view>* out) {
  while (line.size() > kMaxSentenceBytes) {
    size_t cut = line.rfind(' ', kMaxSentenceBytes);
    if (cut == std::string_view::npos || cut < kMaxSentenceBytes / 2) {
      cut = kMaxSentenceBytes;
      // 10xxxxxx is a UTF-8 continuation byte: step back to the start of the character
      while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
      if (cut == 0) cut = kMaxSentenceBytes;  // not UTF-8 at all; any cut will do
    }
    out->push_back(line.substr(0, cut));
    line.remove_prefix(cut);
  }
  if (!line.empty()) out->push_back(line);
}

// ---- Isolated sentencepiece ----
//
// Debian's libsentencepiece carries its own copy of protobuf and exports those symbols, while
// LibTorch loads the system libprotobuf: with both in the global symbol scope, whichever comes
// first breaks the other (a crash in libprotobuf's static init, or CHECK failures inside
// sentencepiece). So bcdtrain must not link sentencepiece; we dlopen it with RTLD_LOCAL (its
// symbols stay out of the global scope) and RTLD_DEEPBIND (it binds to its own protobuf).
// Virtual methods need no symbols; the few non-virtual entry points are looked up by their
// Itanium-mangled names, and every util::Status is built into raw storage and destroyed by
// the library's own destructor, so this file references no sentencepiece symbol at link time.

using sentencepiece::SentencePieceProcessor;
using sentencepiece::util::Status;
using TrainArgs = std::unordered_map<std::string, std::string>;

struct SpmLib {
  void (*construct)(SentencePieceProcessor*);
  void (*destroy_status)(Status*);
  const char* (*status_message)(const Status*);
  void (*set_random_seed)(unsigned);
  void (*set_min_log_level)(int);
  // must match SentencePieceTrainer::Train(const unordered_map&, SentenceIterator*, string*)
  decltype(static_cast<Status (*)(const TrainArgs&, sentencepiece::SentenceIterator*,
                                  std::string*)>(
      &sentencepiece::SentencePieceTrainer::Train)) train;
};

void* open_lib(const char* name) {
  void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) {
    user_error("cannot load {} (needed for tokenizers; install libsentencepiece0): {}", name,
               ::dlerror());
  }
  return h;
}

template <class Fn>
void find_symbol(void* lib, const char* lib_name, const char* symbol, Fn* out) {
  void* p = ::dlsym(lib, symbol);
  BCD_CHECK(p != nullptr,
            "symbol {} missing from {}: sentencepiece version differs from its "
            "headers?",
            symbol, lib_name);
  *out = reinterpret_cast<Fn>(p);
}

const SpmLib& spm() {
  // Loaded once and never unloaded: Tokenizers in static objects may outlive any owner, and
  // sentencepiece's static protobuf state does not survive dlclose.
  static const SpmLib lib = [] {
    constexpr const char* kCore = "libsentencepiece.so.0";
    constexpr const char* kTrain = "libsentencepiece_train.so.0";
    void* core = open_lib(kCore);
    void* train = open_lib(kTrain);
    SpmLib l{};
    find_symbol(core, kCore, "_ZN13sentencepiece22SentencePieceProcessorC1Ev", &l.construct);
    find_symbol(core, kCore, "_ZN13sentencepiece4util6StatusD1Ev", &l.destroy_status);
    find_symbol(core, kCore, "_ZNK13sentencepiece4util6Status13error_messageEv", &l.status_message);
    find_symbol(core, kCore, "_ZN13sentencepiece22SetRandomGeneratorSeedEj", &l.set_random_seed);
    find_symbol(core, kCore, "_ZN13sentencepiece7logging14SetMinLogLevelEi", &l.set_min_log_level);
    find_symbol(train, kTrain,
                "_ZN13sentencepiece20SentencePieceTrainer5TrainERKSt13unordered_mapINSt7__cxx11"
                "12basic_stringIcSt11char_traitsIcESaIcEEES7_St4hashIS7_ESt8equal_toIS7_ESaISt4"
                "pairIKS7_S7_EEEPNS_16SentenceIteratorEPS7_",
                &l.train);
    l.set_min_log_level(2);  // errors come back as Status; INFO/WARNING chatter is noise to us
    return l;
  }();
  return lib;
}

// A util::Status returned by the library, destroyed by the library (see above).
class SpmStatus {
 public:
  template <class Make>
  explicit SpmStatus(Make&& make) {
    new (storage_) Status(make());  // C++17: the call's result is built in place, no copy
  }
  ~SpmStatus() { spm().destroy_status(get()); }
  SpmStatus(const SpmStatus&) = delete;
  SpmStatus& operator=(const SpmStatus&) = delete;
  bool ok() const { return get()->ok(); }
  std::string message() const {
    const char* m = spm().status_message(get());
    return m ? m : "";
  }

 private:
  Status* get() const { return std::launder(reinterpret_cast<Status*>(storage_)); }
  alignas(Status) mutable unsigned char storage_[sizeof(Status)];
};

std::unique_ptr<SentencePieceProcessor> new_processor() {
  // Raw storage plus the library's constructor; the virtual destructor (unique_ptr's delete)
  // runs inside the library, as every other method does.
  auto* p = static_cast<SentencePieceProcessor*>(::operator new(sizeof(SentencePieceProcessor)));
  spm().construct(p);
  return std::unique_ptr<SentencePieceProcessor>(p);
}

// Feeds training sentences from memory, so no temporary file (whose path sentencepiece would
// record in the model, making it differ from run to run).
class SentenceFeed : public sentencepiece::SentenceIterator {
 public:
  explicit SentenceFeed(const std::vector<std::string>& s)
      : sentences_(s), ok_source_(new_processor()) {
    load();
  }
  bool done() const override { return index_ >= sentences_.size(); }
  void Next() override {
    ++index_;
    load();
  }
  const std::string& value() const override { return value_; }
  // We cannot construct a util::Status here (see above), so the library builds the OK status:
  // setting empty extra options on an unloaded processor returns OkStatus before any check.
  Status status() const override { return ok_source_->SetEncodeExtraOptions({}); }

 private:
  void load() {
    if (!done()) value_.assign(sentences_[index_]);
  }
  const std::vector<std::string>& sentences_;
  std::unique_ptr<SentencePieceProcessor> ok_source_;
  size_t index_ = 0;
  std::string value_;
};

}  // namespace

// ---- Loading ----

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

// A tokenizer.json is JSON whatever its name (a .json name says so at once, whatever the file
// holds: the JSON reader judges it); a sentencepiece model is a protobuf, whose first byte is
// never '{' (field 1, a repeated message, is tagged 0x0a). The look stops after 1 MiB of blanks.
bool is_json_file(const std::string& path) {
  constexpr std::string_view kJson = ".json";
  if (path.size() >= kJson.size() && path.compare(path.size() - kJson.size(), kJson.size(), kJson) == 0) return true;
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  for (int n = 0; n < (1 << 20) && in.get(c); ++n)
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c == '{';
  return false;
}

// sentencepiece reads a model whole: shipped ones are 0.5-5 MB (Gemma's 4 MB).
constexpr uint64_t kMaxSpmModelBytes = uint64_t{256} << 20;

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const std::string file = find_tokenizer(path);
  if (file.empty()) {
    if (fs::is_directory(path, ec)) user_error("{}: holds no tokenizer.json or tokenizer.model", path);
    user_error("tokenizer {} not found (expected a tokenizer.json, a sentencepiece tokenizer.model or a directory "
               "holding one)",
               path);
  }
  Tokenizer t;
  t.path_ = file;
  if (is_json_file(file)) {
    t.hf_ = std::make_unique<HfTokenizer>(HfTokenizer::load(file));
  } else {
    const uint64_t bytes = fs::file_size(file, ec);
    if (!ec && bytes > kMaxSpmModelBytes)
      user_error("tokenizer {}: {} ({} bytes); the limit for a sentencepiece model is {} (the file was not read)", file,
                 format_bytes(bytes), bytes, format_bytes(kMaxSpmModelBytes));
    t.sp_ = new_processor();
    SpmStatus status([&] { return t.sp_->Load(file); });
    if (!status.ok())
      user_error("tokenizer {} is neither a tokenizer.json nor a valid sentencepiece model: {}", file, status.message());
  }
  t.read_special_ids();
  std::vector<int> joined = t.encode("a");
  const std::vector<int> rest = t.encode(" b");
  joined.insert(joined.end(), rest.begin(), rest.end());
  t.prefix_free_ = joined == t.encode("a b");
  return t;
}

// ---- Sampling training sentences ----

SentenceSample::SentenceSample(uint64_t max_bytes, size_t max_sentences)
    : max_bytes_(max_bytes), max_sentences_(max_sentences) {}

// Training sentences are lines (as with spm_train on a text file); blank lines are dropped.
void SentenceSample::add(std::string_view doc, double tag) {
  std::vector<std::string_view> pieces;
  while (!doc.empty()) {
    size_t nl = doc.find('\n');
    std::string_view line = doc.substr(0, nl);
    doc.remove_prefix(nl == std::string_view::npos ? doc.size() : nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    pieces.clear();
    append_chunks(line, &pieces);
    for (std::string_view p : pieces) add_sentence(p, tag);
  }
}

void SentenceSample::add_sentence(std::string_view s, double tag) {
  constexpr uint64_t kEntryBytes = sizeof(Entry) + 16;  // the heap slot and the string's allocation
  // splitmix64 of the position: a fixed pseudo-random order, the same on every run
  uint64_t z = ++seen_ * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  kept_.push(Entry{z ^ (z >> 31), seen_, tag, std::string(s)});
  bytes_ += s.size() + kEntryBytes;
  while (!kept_.empty() && (kept_.size() > max_sentences_ || bytes_ > max_bytes_)) {
    bytes_ -= kept_.top().text.size() + kEntryBytes;
    kept_.pop();
  }
}

std::vector<std::string> SentenceSample::take(const std::function<bool(double tag)>& keep) {
  std::vector<Entry> all;
  all.reserve(kept_.size());
  while (!kept_.empty()) {
    all.push_back(std::move(const_cast<Entry&>(kept_.top())));  // moved out, then popped
    kept_.pop();
  }
  bytes_ = 0;
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.index < b.index; });
  std::vector<std::string> out;
  out.reserve(all.size());
  for (Entry& e : all)
    if (!keep || keep(e.tag)) out.push_back(std::move(e.text));
  return out;
}

// ---- Training ----

void Tokenizer::train_bpe(const std::vector<std::string>& docs, int vocab_size,
                          const std::string& model_path) {
  SentenceSample sample;
  for (const std::string& d : docs) sample.add(d);
  train_bpe_sentences(sample.take(), vocab_size, model_path);
}

void Tokenizer::train_bpe_sentences(const std::vector<std::string>& sentences, int vocab_size,
                                    const std::string& model_path) {
  if (vocab_size < 260) {
    // 256 byte-fallback pieces + <unk>, <s>, </s> leave nothing to learn below this
    user_error(
        "tokenizer vocab_size {} is too small for a byte-fallback BPE model (expected "
        "at least 260: 256 byte pieces, 3 specials, plus the corpus characters)",
        vocab_size);
  }
  if (sentences.empty()) {
    user_error("cannot train a tokenizer for {}: the documents hold no non-blank text", model_path);
  }

  // Llama-style: identity normalization and kept whitespace so decode(encode(s)) == s.
  const TrainArgs args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "true"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"input_sentence_size", "0"},  // we subsample ourselves (SentenceSample)
      {"shuffle_input_sentence", "false"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"num_threads", "2"},
      {"minloglevel", "2"},  // errors come back as Status; INFO/WARNING chatter is noise to us
  };
  const SpmLib& lib = spm();
  lib.set_random_seed(1234);
  SentenceFeed feed(sentences);
  std::string model;
  SpmStatus status([&] { return lib.train(args, &feed, &model); });
  if (!status.ok()) {
    user_error("training a BPE tokenizer of vocab_size {} for {} failed: {}", vocab_size,
               model_path, status.message());
  }

  // Written beside the target and renamed, so a reader never sees half a model.
  write_file_atomic(model_path, model, "tokenizer model");
}

// ---- Encoding ----

std::vector<int> Tokenizer::encode(const std::string& text) const {
  if (hf_) return hf_->encode(text, /*add_special=*/false);
  std::vector<int> ids;
  SpmStatus status([&] { return sp_->Encode(text, &ids); });
  BCD_CHECK(status.ok(), "sentencepiece encode with {}: {}", path_, status.message());
  return ids;
}

std::vector<int> Tokenizer::encode_special(const std::string& text) const {
  if (hf_) return hf_->encode(text, /*add_special=*/true);
  std::vector<int> ids = encode(text);
  if (bos_ >= 0) ids.insert(ids.begin(), bos_);
  return ids;
}

// SentencePiece-style tokenizers prepend "▁" (a dummy prefix) to every string they encode, so
// encode(a) + encode(b) != encode(a + b). As torchtune's SentencePieceBaseTokenizer does
// (trim_leading_whitespace), we encode "\n" + text and drop the tokens of "\n": no merge
// crosses the newline (Llama's and ours byte-encode it), so what remains is `text` as it
// continues the text before it. Checked, not assumed. Byte-level BPE (Llama 3, Qwen) adds no
// prefix: the text is encoded as it is.
std::vector<int> Tokenizer::encode_continuation(const std::string& text) const {
  if (prefix_free_) return encode(text);
  static constexpr const char* kAnchor = "\n";
  const std::vector<int> anchor = encode(kAnchor);
  std::vector<int> ids = encode(kAnchor + text);
  if (ids.size() < anchor.size() || !std::equal(anchor.begin(), anchor.end(), ids.begin())) {
    user_error("tokenizer {} merges a newline with the text after it; chat templates need "
               "\"\\n\" to tokenize on its own (expected a sentencepiece model like Llama's)",
               path_);
  }
  ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(anchor.size()));
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
  const int n = vocab_size();
  for (int id : ids) {
    if (id < 0 || id >= n) {
      user_error("token id {} is outside the vocabulary [0, {}) of tokenizer {}", id, n, path_);
    }
  }
  if (hf_) return hf_->decode(ids, skip_special);
  std::string text;  // sentencepiece leaves its control pieces (BOS, EOS) out either way
  SpmStatus status([&] { return sp_->Decode(ids, &text); });
  BCD_CHECK(status.ok(), "sentencepiece decode with {}: {}", path_, status.message());
  return text;
}

int Tokenizer::vocab_size() const { return hf_ ? hf_->vocab_size() : sp_->GetPieceSize(); }
int Tokenizer::bos_id() const { return bos_; }
int Tokenizer::eos_id() const { return eos_; }
int Tokenizer::pad_id() const { return pad_; }
const std::vector<int>& Tokenizer::eos_ids() const { return eos_ids_; }
bool Tokenizer::is_eos(int id) const { return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end(); }

int Tokenizer::special_id(const std::string& piece) const {
  if (!hf_) return -1;
  for (const HfTokenizer::AddedToken& t : hf_->added_tokens())
    if (t.content == piece) return t.id;
  return -1;
}

int Tokenizer::model_bos() const { return sp_->bos_id(); }
int Tokenizer::model_eos() const { return sp_->eos_id(); }
int Tokenizer::model_pad() const { return sp_->pad_id(); }
int Tokenizer::sp_piece_id(const std::string& piece) const {
  const int id = sp_->PieceToId(piece);
  return id == sp_->unk_id() && sp_->IdToPiece(id) != piece ? -1 : id;
}

void check_model_tokenizer(const std::string& tokenizer, int64_t model_vocab, const std::string& model) {
  int64_t pieces = 0;
  try {
    pieces = Tokenizer::load(tokenizer).vocab_size();
  } catch (const UserError& e) {
    user_error("{}: the tokenizer that comes with it cannot be used: {} (fix or remove {}; nothing was written)",
               model, e.what(), tokenizer);
  }
  if (pieces > model_vocab)
    user_error("{}: its tokenizer {} has {} pieces but the model has {} embedding rows: they do not belong together "
               "(give the model's own tokenizer, or remove {}; nothing was written)",
               model, tokenizer, pieces, model_vocab, tokenizer);
}

}  // namespace bcd
