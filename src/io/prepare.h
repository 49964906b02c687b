// `bcdtrain prepare`: text files -> documents -> train/val split -> token ids in <dir>/tokens.h5
// (the layout is in io/dataset.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/dataset.h"

namespace bcd {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or directories (directories: their plain files)
  std::string out_dir;
  std::string tokenizer_model;      // existing sentencepiece model; empty = train BPE
  int vocab_size = 2048;            // for a trained BPE model
  double val_fraction = 0.05;       // fraction of documents held out for validation
  uint64_t seed = 1234;             // decides which documents go to validation
  bool force = false;               // replace an existing out_dir
  // Instruction data (.jsonl inputs, io/chat.h): the chat template records are laid out in, and
  // whether a bad record is counted and skipped rather than refused.
  std::string chat_template = "plain";
  bool skip_bad = false;
};

struct PrepareReport {
  int64_t n_docs_train = 0, n_docs_val = 0;
  int64_t n_tokens_train = 0, n_tokens_val = 0;
  int vocab_size = 0;
  double unigram_val_loss = 0;      // nats/token (over the targets the loss counts)
  int64_t n_targets_train = 0, n_targets_val = 0;  // tokens the loss counts (all of them for plain text)
  int64_t n_bad_records = 0;        // instruction records skipped (skip_bad)
  bool instruct = false;            // .jsonl inputs: the dataset holds loss masks
  std::vector<std::string> sources; // files actually read
};

// Splits text into documents, tokenizes, writes <out_dir> atomically (temporary dir + rename).
// Fortune files (records separated by lines holding only "%") give one document per record;
// .jsonl files give one document per instruction record, laid out by the chat template, and
// the dataset a loss mask counting only response tokens (plain-text documents beside them count
// whole); other files give one document per blank-line-separated paragraph.
PrepareReport prepare_dataset(const PrepareOptions& opt);

}  // namespace bcd
