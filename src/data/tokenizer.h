// Tokenizer glue over sentencepiece: load a tokenizer.model, train a BPE model on documents.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace bcd {

// Training sentences for a BPE tokenizer, drawn from a stream of documents in bounded memory.
// Every non-blank line of a document is a sentence (a line longer than 8 KiB is cut into pieces
// at spaces). While the sentences kept hold more than max_sentences or max_bytes (text plus
// bookkeeping), the one with the highest priority, a hash of its position in the stream, is
// dropped: what stays is a uniform sample, handed back in stream order. When everything fits,
// every sentence is kept, in order.
class SentenceSample {
 public:
  static constexpr size_t kMaxSentences = 2'000'000;  // BPE training time grows with the input
  explicit SentenceSample(uint64_t max_bytes = UINT64_MAX, size_t max_sentences = kMaxSentences);
  // `tag` labels the document's sentences for take()'s filter (prepare: the split key).
  void add(std::string_view doc, double tag = 0);
  // The kept sentences in stream order, those whose tag `keep` accepts (all when empty).
  std::vector<std::string> take(const std::function<bool(double tag)>& keep = {});
  uint64_t bytes() const { return bytes_; }
  uint64_t seen() const { return seen_; }  // sentences offered so far

 private:
  struct Entry {
    uint64_t priority, index;
    double tag;
    std::string text;
    bool operator<(const Entry& o) const { return priority < o.priority; }
  };
  void add_sentence(std::string_view s, double tag);
  uint64_t max_bytes_;
  size_t max_sentences_;
  uint64_t bytes_ = 0, seen_ = 0;
  std::priority_queue<Entry> kept_;  // highest priority on top: the next to drop
};

// The files of a tokenizer in a directory. A Hugging Face tokenizer is tokenizer.json (or, for
// SentencePiece models, tokenizer.model) plus the files that say its special ids and chat
// template; they travel together (prepare, the run directory, import, export).
inline constexpr const char* kHfTokenizerFile = "tokenizer.json";
inline constexpr const char* kSpmTokenizerFile = "tokenizer.model";
// tokenizer_config.json, special_tokens_map.json, generation_config.json.
const std::vector<std::string>& tokenizer_config_files();
// `path` itself when it is a file; in a directory its tokenizer.json, else its tokenizer.model;
// "" when there is none.
std::string find_tokenizer(const std::string& path);
// Every tokenizer file of `dir` (tokenizer.json, tokenizer.model), each an equally valid form.
std::vector<std::string> tokenizer_forms_in(const std::string& dir);
// Copies the tokenizer file `main` and the config files beside it into `dir` (each written to a
// temporary name and renamed; a file onto itself is left alone), and also the directory's other
// tokenizer form when `both_forms`. Returns the paths written, `dir`/basename(main) first.
// UserError naming the file on a failure.
std::vector<std::string> copy_tokenizer_files(const std::string& main, const std::string& dir, bool both_forms = false);

// Whether the file `file` holds the bytes of one of `dir`'s tokenizer forms (the same tokenizer,
// whichever form a dataset was prepared with).
bool tokenizer_matches(const std::string& file, const std::string& dir);

// The tokenizer that comes with a model (`model`: its directory or weights file) must load and
// have at most `model_vocab` pieces (the model's embedding rows): UserError naming both, before an
// import or export writes a file that could only fail later.
void check_model_tokenizer(const std::string& tokenizer, int64_t model_vocab, const std::string& model);

class HfTokenizer;

// A tokenizer: a SentencePiece model (tokenizer.model) or a Hugging Face tokenizer.json, with
// special ids from the files beside it (tokenizer_config.json, special_tokens_map.json,
// generation_config.json), never assumed.
class Tokenizer {
 public:
  // `path`: a tokenizer.json, a tokenizer.model (any name: a file that parses as JSON is a
  // tokenizer.json) or a directory holding one (find_tokenizer). UserError naming the path when
  // it is missing or invalid, or when a config file beside it is malformed or names a special
  // token the vocabulary lacks.
  static Tokenizer load(const std::string& path);
  // Trains a BPE model of `vocab_size` pieces on `docs` and writes it to `model_path`
  // (byte fallback on, so every UTF-8 input round-trips; deterministic for the same input).
  static void train_bpe(const std::vector<std::string>& docs, int vocab_size,
                        const std::string& model_path);
  // The same on sentences already drawn (SentenceSample::take).
  static void train_bpe_sentences(const std::vector<std::string>& sentences, int vocab_size,
                                  const std::string& model_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The text's ids, without special tokens (a JSON tokenizer still matches its added tokens,
  // <|eot_id|> and the like, to their single ids wherever they occur in the text).
  std::vector<int> encode(const std::string& text) const;
  // With special tokens: a JSON tokenizer's post-processor (BOS ...); a SentencePiece model's BOS.
  std::vector<int> encode_special(const std::string& text) const;
  // `text` as it continues other text: without the leading "▁" SentencePiece-style tokenizers
  // put before a document, so that encode(a) + encode_continuation(b) decodes to a + b.
  // UserError when the tokenizer merges a newline into the text after it (see chat.h).
  std::vector<int> encode_continuation(const std::string& text) const;
  // UserError naming the tokenizer on an id outside [0, vocab_size()).
  std::string decode(const std::vector<int>& ids, bool skip_special = false) const;
  int vocab_size() const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;  // the end of a document; -1 when the model has none
  // Every id that ends a generation: eos_id() and generation_config.json's eos_token_id(s).
  const std::vector<int>& eos_ids() const;
  bool is_eos(int id) const;
  int pad_id() const;  // -1 when the model has none
  // The id of `piece` when the tokenizer holds it as one special (added) token, else -1.
  int special_id(const std::string& piece) const;
  bool is_json() const { return hf_ != nullptr; }
  // tokenizer_config.json's chat_template beside the tokenizer ("" when none), and that file.
  const std::string& chat_template_source() const { return chat_template_; }
  const std::string& chat_template_file() const { return chat_template_file_; }
  const std::string& path() const { return path_; }

 private:
  Tokenizer();
  void read_special_ids();
  // A SentencePiece model's own ids (-1: none), and the id of a piece it holds (-1: none).
  int model_bos() const;
  int model_eos() const;
  int model_pad() const;
  int sp_piece_id(const std::string& piece) const;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::unique_ptr<HfTokenizer> hf_;
  std::string path_;
  int bos_ = -1, eos_ = -1, pad_ = -1;
  std::vector<int> eos_ids_;
  bool prefix_free_ = false;  // encode(a) + encode(b) == encode(a + b) at a space: no dummy prefix
  std::string chat_template_, chat_template_file_;
};

}  // namespace bcd
