// Token datasets in HDF5: `bcdtrain prepare` writes them (io/prepare.h), TokenDataset reads them.
//
// Layout of <dir>/tokens.h5 (plus <dir>/tokenizer.model beside it):
//   /train/tokens     uint16 (vocab <= 65536) or uint32, documents concatenated, each ended by EOS
//   /train/doc_offsets uint64 [n_docs + 1], start of each document in /train/tokens
//   /train/loss_mask  uint8 [n_tokens], instruction data only: 1 where the token is a target
//                      the loss counts (a response token or its end marker), 0 elsewhere
//   /val/tokens, /val/doc_offsets (, /val/loss_mask)   the same for the validation split
//   root attributes: format_version, vocab_size, bos_id, eos_id, tokenizer (file name),
//   tokenizer_xxh64 (hash of the tokenizer file, hex), val_fraction, seed, sources (newline-joined),
//   unigram_val_loss (nats/token of an add-one unigram model fit on train, evaluated on val;
//   over counted targets only with a loss mask), chat_template (instruction data only)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bcd {

enum class Split { kTrain, kVal };
const char* split_name(Split s);

// The chat template instruction data in `dir` was laid out with; "" for plain text, or when the
// dataset cannot be read (callers that need the data open it and get its error).
std::string dataset_chat_template(const std::string& dir);

class TokenDataset {
 public:
  // Opens <dir>/tokens.h5; UserError naming the file when missing, malformed or inconsistent.
  static TokenDataset open(const std::string& dir);

  const std::vector<int32_t>& tokens(Split s) const { return s == Split::kTrain ? train_ : val_; }
  const std::vector<uint64_t>& doc_offsets(Split s) const {
    return s == Split::kTrain ? train_docs_ : val_docs_;
  }
  // Per-token 0/1 loss mask; empty when every token is a target (plain text).
  const std::vector<uint8_t>& loss_mask(Split s) const { return s == Split::kTrain ? train_mask_ : val_mask_; }
  bool masked() const { return !train_mask_.empty(); }
  int vocab_size() const { return vocab_size_; }
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  double unigram_val_loss() const { return unigram_val_loss_; }
  const std::string& dir() const { return dir_; }
  std::string tokenizer_path() const;  // <dir>/<tokenizer attribute>

 private:
  std::string dir_, tokenizer_file_;
  std::vector<int32_t> train_, val_;
  std::vector<uint64_t> train_docs_, val_docs_;
  std::vector<uint8_t> train_mask_, val_mask_;
  int vocab_size_ = 0, bos_id_ = -1, eos_id_ = -1;
  double unigram_val_loss_ = 0;
};

}  // namespace bcd
