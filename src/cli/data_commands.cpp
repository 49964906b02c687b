// The data and storage commands: prepare (text into a token dataset) and iobench (the drive
// under the NVMe tier).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>

#include "base/bytes.h"
#include "base/printable.h"
#include "cli/command.h"
#include "data/chat.h"
#include "data/prepare.h"
#include "io/io_engine.h"
#include "io/iobench.h"

namespace bcd::cli {

Command add_prepare(CLI::App& app) {
  auto popt = std::make_shared<PrepareOptions>();
  auto* prepare = app.add_subcommand("prepare", "tokenize text files into an HDF5 token dataset");
  prepare->add_option("--input", popt->inputs,
                      "text files or directories (fortune files: one document per % record; .jsonl: {\"text\"} "
                      "records, or instruction records {\"prompt\", \"response\"} or {\"messages\": [...]}, "
                      "trained on responses only)")
      ->required()
      ->transform(existing_path("a file or directory"));
  prepare->add_option("--out", popt->out_dir, "output dataset directory")->required()->transform(pathname("a directory"));
  prepare->add_option("--tokenizer", popt->tokenizer_model,
                      "existing tokenizer: a tokenizer.json, a sentencepiece tokenizer.model, or a Hugging Face model "
                      "directory holding one (else train BPE)")
      ->transform(existing_path("a tokenizer.json, tokenizer.model or Hugging Face directory"));
  prepare->add_option("--vocab-size", popt->vocab_size, "BPE vocabulary size when training a tokenizer")
      ->transform(integer<int>(64, 1 << 20));
  prepare->add_option("--val-fraction", popt->val_fraction, "fraction of documents held out for validation")
      ->transform(number(0.0, 0.5));
  prepare->add_option("--seed", popt->seed, "seed of the train/validation split")->transform(integer<uint64_t>());
  prepare->add_flag("--force", popt->force, "replace an existing output directory");
  prepare->add_option("--chat-template", popt->chat_template,
                      "how .jsonl records are laid out: plain, llama2, llama3, chatml, or auto (the family of the "
                      "--tokenizer's chat_template)")
      ->capture_default_str()
      ->transform(choice([](const std::string& name) {
        if (name != "auto") chat_template_from_name(name);
      }, "plain, llama2, llama3, chatml or auto"));
  prepare->add_flag("--skip-bad", popt->skip_bad, "count and skip bad .jsonl records instead of stopping at the first");
  prepare->add_option("--memory-mb", popt->memory_mb, "memory prepare may hold, whatever the corpus size (MiB)")
      ->capture_default_str()->transform(integer<int64_t>(16, int64_t{1} << 30));
  prepare->add_option("--threads", popt->threads, "tokenizing threads (0: every core)")
      ->capture_default_str()->transform(integer<int>(0, 4096));
  auto run = [popt](const Overrides&) {
    const PrepareOptions& o = *popt;
    PrepareReport r = prepare_dataset(o);
    fmt::print("prepared {}: {} train docs / {} tokens, {} val docs / {} tokens, vocab {}, unigram val loss {:.4f}\n",
               printable_line(o.out_dir), r.n_docs_train, r.n_tokens_train, r.n_docs_val, r.n_tokens_val, r.vocab_size,
               r.unigram_val_loss);
    if (r.instruct)
      fmt::print("instruction data ({} template{}; {} records): the loss counts {} train / {} val tokens (responses){}\n",
                 r.chat_template, o.chat_template == "auto" ? ", recognized from the tokenizer's chat_template" : "",
                 r.record_forms.empty() ? "no valid" : printable_line(r.record_forms),
                 r.n_targets_train, r.n_targets_val,
                 r.n_bad_records ? fmt::format("; {} bad record(s) skipped", r.n_bad_records) : "");
    else if (r.n_bad_records)
      fmt::print("{} bad record(s) skipped\n", r.n_bad_records);
    if (r.n_docs_cut)
      fmt::print("{} document(s) longer than {} cut into pieces (--memory-mb decides)\n", r.n_docs_cut,
                 format_bytes(static_cast<uint64_t>(o.memory_mb) << 14));
    fmt::print("tokenized {} of text in {:.1f}s: {:.0f} tokens/s\n", format_bytes(r.bytes_read), r.tokenize_seconds,
               static_cast<double>(r.n_tokens_train + r.n_tokens_val) / std::max(r.tokenize_seconds, 1e-9));
    return 0;
  };
  return {prepare, run, false, {}};
}

Command add_iobench(CLI::App& app) {
  struct Flags {
    IoBenchOptions iopt;
    std::string size = "2GiB", block = "1MiB", mode = "read", engine = "auto";
    bool buffered = false;
  };
  auto f = std::make_shared<Flags>();
  auto* iobench = app.add_subcommand("iobench", "sequential read/write throughput of a drive through the I/O engine");
  iobench->add_option("--path", f->iopt.path, "directory on the drive under test")
      ->required()
      ->transform(pathname("a directory"));
  iobench->add_option("--size", f->size, "file size (units: 4KiB, 1MiB, 2GiB, 1.5GB)")->transform(byte_size(1));
  iobench->add_option("--block-size", f->block, "bytes per request")->transform(byte_size(1));
  iobench->add_option("--queue-depth", f->iopt.queue_depth, "requests in flight")
      ->transform(integer<unsigned>(1, 4096));
  iobench->add_option("--mode", f->mode, "read or write")
      ->transform(choice([](const std::string& s) { parse_io_op(s); }, "read or write"));
  iobench->add_option("--engine", f->engine, "auto (io_uring, else threads), uring or threads")
      ->transform(choice([](const std::string& s) { parse_engine_kind(s); }, "auto, uring or threads"));
  iobench->add_option("--loops", f->iopt.loops, "passes over the file (at least)")->transform(integer<unsigned>(1));
  iobench->add_option("--seconds", f->iopt.seconds, "keep making passes until this many seconds went by")
      ->transform(number(0));
  iobench->add_flag("--buffered", f->buffered, "go through the page cache instead of O_DIRECT");
  auto run = [f](const Overrides&) {
    IoBenchOptions iopt = f->iopt;
    iopt.size = parse_bytes(f->size);
    iopt.block_size = parse_bytes(f->block);
    iopt.mode = parse_io_op(f->mode);
    iopt.engine = parse_engine_kind(f->engine);
    iopt.direct = !f->buffered;
    return run_iobench(iopt);
  };
  return {iobench, run, false, {}};
}

}  // namespace bcd::cli
