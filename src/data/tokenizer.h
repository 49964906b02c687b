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

class Tokenizer {
 public:
  // Loads a sentencepiece model file; UserError naming the path when it is missing or invalid.
  static Tokenizer load(const std::string& model_path);
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

  std::vector<int> encode(const std::string& text) const;
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;  // -1 when the model has none
  const std::string& path() const { return path_; }

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
};

}  // namespace bcd
