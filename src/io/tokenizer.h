// Tokenizer glue over sentencepiece: load a tokenizer.model, train a BPE model on documents.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace bcd {

class Tokenizer {
 public:
  // Loads a sentencepiece model file; UserError naming the path when it is missing or invalid.
  static Tokenizer load(const std::string& model_path);
  // Trains a BPE model of `vocab_size` pieces on `docs` and writes it to `model_path`
  // (byte fallback on, so every UTF-8 input round-trips; deterministic for the same input).
  static void train_bpe(const std::vector<std::string>& docs, int vocab_size,
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
