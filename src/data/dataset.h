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

// A prepared dataset, read on demand: open() reads the attributes and checks the layout (dataset
// types and sizes, doc_offsets' ends, mask presence) but no token; windows are read with pread at
// the file offsets of the contiguous datasets, so memory does not grow with the corpus, and reads
// are safe from several threads at once (the loader's prefetch beside the trainer's evaluation).
// Token ids and mask values are checked as they are read: a bad one is a UserError naming the
// file, the split and the position. Cheap to copy (copies share the open file).
class TokenDataset {
 public:
  // Opens <dir>/tokens.h5; UserError naming the file when missing, malformed or inconsistent
  // (including datasets not stored contiguously, which `bcdtrain prepare` never writes).
  static TokenDataset open(const std::string& dir);

  int64_t n_tokens(Split s) const;
  int64_t n_docs(Split s) const;
  // Tokens [start, start + count) of split s as int64 ids (what a batch tensor holds) or int32.
  // UserError when the range is outside the split or an id is outside the vocabulary.
  void read_tokens(Split s, int64_t start, int64_t count, int64_t* out) const;
  std::vector<int32_t> read_tokens(Split s, int64_t start, int64_t count) const;
  std::vector<int32_t> read_tokens(Split s) const { return read_tokens(s, 0, n_tokens(s)); }
  // Loss mask entries [start, start + count) (0 or 1; masked() datasets only).
  void read_mask(Split s, int64_t start, int64_t count, uint8_t* out) const;
  std::vector<uint8_t> read_mask(Split s) const;
  // The [n_docs + 1] document start offsets, checked non-decreasing (UserError otherwise).
  std::vector<uint64_t> read_doc_offsets(Split s) const;
  // Whether the dataset holds loss masks (instruction data); else every token is a target.
  bool masked() const;
  int token_bytes() const;  // 2 (uint16 ids) or 4 (uint32)
  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;
  double unigram_val_loss() const;
  const std::string& dir() const;
  const std::string& file() const;  // <dir>/tokens.h5
  std::string tokenizer_path() const;  // <dir>/<tokenizer attribute>

 private:
  struct Impl;
  static void read_layout(Impl& d);          // open's phases: the attributes and splits' layout,
  static void check_extents(const Impl& d);  // then the file's size and doc_offsets' ends
  std::shared_ptr<const Impl> impl_;
};

}  // namespace bcd
