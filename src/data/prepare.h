// `bcdtrain prepare`: text files -> documents -> train/val split -> token ids in <dir>/tokens.h5
// (the layout is in io/dataset.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace bcd {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or directories (directories: their plain files)
  std::string out_dir;
  // An existing tokenizer: a tokenizer.json, a sentencepiece tokenizer.model, or a directory
  // holding one (a Hugging Face model directory); empty = train BPE. The dataset keeps a copy,
  // with the Hugging Face config files beside it (special ids, chat template).
  std::string tokenizer_model;
  int vocab_size = 2048;            // for a trained BPE model
  double val_fraction = 0.05;       // fraction of documents held out for validation
  uint64_t seed = 1234;             // decides which documents go to validation
  bool force = false;               // replace an existing out_dir
  // Instruction data (.jsonl inputs, io/chat.h): the chat template records are laid out in, and
  // whether a bad record is counted and skipped rather than refused.
  // "auto": the family of the given tokenizer's chat_template (chat.h recognize_chat_template).
  std::string chat_template = "plain";
  bool skip_bad = false;
  // What prepare may hold in memory, in MiB, whatever the corpus size: documents being read and
  // tokenized and their tokens on the way to disk (about 3/4 of it at most), and the tokenizer's
  // training sample (a quarter; sentencepiece's own training needs a few times its sample on
  // top). At least 16. It also decides where over-long documents are cut (see below).
  int64_t memory_mb = 512;
  // Tokenizing threads (0 = every core).
  int threads = 0;
};

struct PrepareReport {
  int64_t n_docs_train = 0, n_docs_val = 0;
  int64_t n_tokens_train = 0, n_tokens_val = 0;
  int vocab_size = 0;
  double unigram_val_loss = 0;      // nats/token (over the targets the loss counts)
  int64_t n_targets_train = 0, n_targets_val = 0;  // tokens the loss counts (all of them for plain text)
  int64_t n_bad_records = 0;        // records skipped (skip_bad)
  int64_t n_docs_cut = 0;           // cuts made in documents longer than the memory limit allows
  uint64_t bytes_read = 0;          // input bytes, once (the split pass reads them twice)
  int64_t tokenizer_sentences = 0;  // sentences the tokenizer was trained on (0: given one)
  double tokenize_seconds = 0;      // the tokenizing pass, reading to writing
  bool instruct = false;            // .jsonl inputs: the dataset holds loss masks
  std::string chat_template;        // the template instruction records were laid out in
  std::string record_forms;         // their form ("Alpaca"; with several: "Alpaca (a.jsonl), ShareGPT (b.jsonl)")
  std::vector<std::string> sources; // files actually read
};

// Splits text into documents, tokenizes, writes <out_dir> atomically (temporary dir + rename),
// streaming: memory stays within opt.memory_mb whatever the size of the inputs.
// Inputs, read in blocks:
//   - fortune files (a line holding only "%" within their first 64 MiB) give one document per
//     record between such lines;
//   - .jsonl files whose first record has a "text" string give one document per record's text;
//   - other .jsonl files are instruction data: one document per record, laid out by the chat
//     template, and the dataset gets a loss mask counting only response tokens (plain-text
//     documents beside them count whole);
//   - other files give one document per blank-line-separated paragraph.
// A document longer than 1/64 of the memory limit (8 MiB by default) is cut at a line (or,
// failing that, a character) boundary into several (report.n_docs_cut).
// Two passes over the inputs: the first hashes every document into its split (and samples the
// tokenizer's training sentences from the train split); the second tokenizes on every core
// (ordered TBB pipeline) and appends to the output, so the result equals an in-memory run's.
// Interrupted, it leaves only its temporary directory <out_dir>.tmp-<pid>, never <out_dir>.
PrepareReport prepare_dataset(const PrepareOptions& opt);

}  // namespace bcd
