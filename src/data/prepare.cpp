// `bcdtrain prepare`, streaming: inputs are read in blocks and cut into documents one at a time
// (DocumentStream). A first pass hashes every document into its split and samples the
// tokenizer's training sentences; a second tokenizes on every core through an ordered TBB
// pipeline and appends tokens, document offsets and masks to raw files in the temporary output
// directory, copied at the end into the contiguous datasets of tokens.h5 (whose sizes are known
// only then) and renamed into place. Memory holds a bounded number of blocks, never the corpus.
#include "data/prepare.h"

#include <H5Cpp.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include "data/chat.h"
#include "data/documents.h"
#include "io/h5_util.h"
#include "data/tokenizer.h"
#include "base/bytes.h"
#include "base/files.h"
#include "base/error.h"
#include "base/progress.h"
#include "base/stop.h"

namespace bcd {

namespace fs = std::filesystem;

namespace {

using h5::kFormatVersion;
using h5::kTokensFile;
using h5::quiet_hdf5;
using h5::rethrow_hdf5;
using h5::write_attr;

constexpr size_t kWriteBuffer = size_t{1} << 20;     // per raw output file
constexpr size_t kCopyBlock = size_t{8} << 20;       // raw file -> HDF5 dataset, per write

[[noreturn]] void io_error(const char* what, const std::string& path) {
  user_error("prepare: cannot {} {}: {}", what, path, std::strerror(errno));
}

// ---- Train/validation split ----

// Uniform in [0, 1) from the document text: the split depends on content only, so duplicates
// land together and re-running prepare (or adding files) never moves a document across.
double split_key(const Document& d, uint64_t seed) {
  const std::string& s = d.pieces.empty() ? d.text : d.split_key;
  return static_cast<double>(XXH64(s.data(), s.size(), seed) >> 11) * 0x1.0p-53;
}

// Validation takes the documents whose key is below the fraction; when that leaves a split
// empty, the documents of the lowest key move to validation (or those of the highest to train).
struct SplitRule {
  double fraction = 0;
  double to_val = -1, to_train = 2;  // keys moved across (none by default: keys are in [0, 1))
  bool is_val(double key) const { return key == to_val || (key != to_train && key < fraction); }
};

// What the first pass learns: how many documents there are, where their keys fall.
struct SplitCounts {
  int64_t n = 0, n_val = 0, n_lo = 0, n_hi = 0;
  double lo = 2, hi = -1;
  void add(double key, double fraction) {
    ++n;
    n_val += key < fraction;
    if (key < lo) lo = key, n_lo = 0;
    if (key == lo) ++n_lo;
    if (key > hi) hi = key, n_hi = 0;
    if (key == hi) ++n_hi;
  }
};

// "Alpaca" when every instruction file holds that form; else each file's: "Alpaca (a.jsonl),
// ShareGPT (b.jsonl)".
std::string describe_forms(const std::vector<std::pair<std::string, RecordForm>>& forms) {
  if (forms.empty()) return "";
  bool one = true;
  for (const auto& f : forms) one &= f.second == forms.front().second;
  if (one) return record_form_name(forms.front().second);
  std::string out;
  for (const auto& [file, form] : forms)
    out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", record_form_name(form), fs::path(file).filename().string());
  return out;
}

SplitRule split_rule(const SplitCounts& c, double fraction, int64_t n_bad) {
  // What --skip-bad took away is part of why too few are left.
  const std::string skipped = n_bad > 0 ? fmt::format("; --skip-bad skipped {} bad record(s)", n_bad) : "";
  if (c.n < 2) {
    user_error(
        "prepare: the inputs hold {} non-empty document(s), expected at least 2 "
        "(one for train, one for validation){}",
        c.n, skipped);
  }
  SplitRule rule{fraction};
  int64_t n_val = c.n_val;
  if (n_val == 0) {
    rule.to_val = c.lo;
    n_val = c.n_lo;
  } else if (n_val == c.n) {
    rule.to_train = c.hi;
    n_val = c.n - c.n_hi;
  }
  if (n_val == 0 || n_val == c.n) {
    user_error(
        "prepare: the {} documents are all identical, so they cannot be split into "
        "train and validation (expected at least 2 distinct documents){}",
        c.n, skipped);
  }
  return rule;
}

// ---- Output ----

// An append-only raw file in the staging directory, written through a buffer.
class AppendFile {
 public:
  explicit AppendFile(std::string path) : path_(std::move(path)) {
    fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd_) io_error("create", path_);
    buf_.reserve(kWriteBuffer);
  }
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  void append(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const size_t k = std::min(n, kWriteBuffer - buf_.size());
      buf_.insert(buf_.end(), c, c + k);
      c += k;
      n -= k;
      if (buf_.size() == kWriteBuffer) flush();
    }
  }
  void flush() {
    if (!write_fully(fd_.get(), buf_.data(), buf_.size())) io_error("write", path_);
    bytes_ += buf_.size();
    buf_.clear();
  }
  uint64_t bytes() const { return bytes_ + buf_.size(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
  std::vector<char> buf_;
  uint64_t bytes_ = 0;
};

// One split on its way to disk: tokens (2 or 4 bytes each), document offsets, the loss mask of
// instruction data, and the unigram counts of its targets.
struct SplitOut {
  SplitOut(const fs::path& dir, Split s, bool wide, bool masked, int vocab)
      : tokens((dir / (std::string(split_name(s)) + ".tokens")).string()),
        offsets((dir / (std::string(split_name(s)) + ".doc_offsets")).string()),
        wide(wide),
        counts(static_cast<size_t>(vocab)) {
    if (masked) mask = std::make_unique<AppendFile>((dir / (std::string(split_name(s)) + ".loss_mask")).string());
    const uint64_t zero = 0;
    offsets.append(&zero, sizeof zero);
  }
  void add(const MaskedTokens& doc) {
    if (wide) {
      for (int id : doc.ids) {
        const auto v = static_cast<uint32_t>(id);
        tokens.append(&v, sizeof v);
      }
    } else {
      narrow.assign(doc.ids.begin(), doc.ids.end());
      tokens.append(narrow.data(), narrow.size() * sizeof(uint16_t));
    }
    if (mask) {
      BCD_CHECK(doc.target.size() == doc.ids.size());
      mask->append(doc.target.data(), doc.target.size());
    }
    for (size_t i = 0; i < doc.ids.size(); ++i) {
      if (!mask || doc.target[i]) {
        ++counts[static_cast<size_t>(doc.ids[i])];
        ++targets;
      }
    }
    n_tokens += doc.ids.size();
    ++n_docs;
    offsets.append(&n_tokens, sizeof n_tokens);
  }
  void flush() {
    tokens.flush();
    offsets.flush();
    if (mask) mask->flush();
  }

  AppendFile tokens, offsets;
  std::unique_ptr<AppendFile> mask;
  bool wide;
  std::vector<uint16_t> narrow;
  std::vector<uint64_t> counts;
  uint64_t n_tokens = 0, n_docs = 0;
  int64_t targets = 0;
};

// Add-one smoothed unigram fit on train, mean NLL (nats/token) on val: the loss a model that
// learned only token frequencies would reach; a real run's val loss should get well below it.
// Instruction data: over the targets the loss counts, on both sides.
double unigram_loss(const SplitOut& train, const SplitOut& val) {
  const auto n_train = static_cast<double>(train.targets);
  const auto n_val = static_cast<double>(val.targets);
  const double log_denom = std::log(n_train + static_cast<double>(train.counts.size()));
  double nll = 0;
  for (size_t t = 0; t < val.counts.size(); ++t) {
    if (val.counts[t]) {
      nll += static_cast<double>(val.counts[t]) *
             (log_denom - std::log(static_cast<double>(train.counts[t]) + 1.0));
    }
  }
  return n_val == 0 ? 0.0 : nll / n_val;
}

// Copies a raw file into a new contiguous 1-D dataset of `type` (elements of `elem` bytes, the
// file's little-endian layout being the machine's), a block at a time, then deletes the file.
void copy_into(H5::Group& g, const char* name, const H5::PredType& type, const H5::PredType& mem, size_t elem,
               const std::string& raw) {
  const uint64_t bytes = fs::file_size(raw);
  hsize_t n = bytes / elem;
  BCD_CHECK(n * elem == bytes && n > 0, "{}: {} bytes", raw, bytes);
  H5::DataSet ds = g.createDataSet(name, type, H5::DataSpace(1, &n));
  H5::DataSpace file_space = ds.getSpace();
  UniqueFd fd(::open(raw.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) io_error("open", raw);
  std::vector<char> buf(kCopyBlock - kCopyBlock % elem);
  for (hsize_t at = 0; at < n;) {
    const hsize_t k = std::min<hsize_t>(n - at, buf.size() / elem);
    if (pread_fully(fd.get(), buf.data(), k * elem, at * elem) != static_cast<int64_t>(k * elem)) io_error("read", raw);
    file_space.selectHyperslab(H5S_SELECT_SET, &k, &at);
    H5::DataSpace mem_space(1, &k);
    ds.write(buf.data(), mem, mem_space, file_space);
    at += k;
  }
  fd.reset();
  fs::remove(raw);
}

void write_split(H5::H5File& file, Split s, const SplitOut& out) {
  H5::Group g = file.createGroup(std::string("/") + split_name(s));
  // every split holds >= 1 document and so >= 1 token (its EOS): no zero-size datasets
  BCD_CHECK(out.n_tokens > 0 && out.n_docs > 0);
  if (out.wide)
    copy_into(g, "tokens", H5::PredType::STD_U32LE, H5::PredType::NATIVE_UINT32, 4, out.tokens.path());
  else
    copy_into(g, "tokens", H5::PredType::STD_U16LE, H5::PredType::NATIVE_UINT16, 2, out.tokens.path());
  copy_into(g, "doc_offsets", H5::PredType::STD_U64LE, H5::PredType::NATIVE_UINT64, 8, out.offsets.path());
  if (out.mask) copy_into(g, "loss_mask", H5::PredType::STD_U8LE, H5::PredType::NATIVE_UINT8, 1, out.mask->path());
}

std::string hex_xxh64(const std::string& bytes) {
  return fmt::format("{:016x}", XXH64(bytes.data(), bytes.size(), 0));
}

}  // namespace

// ---- prepare ----

namespace {

// The output directory opt names (normalized), after every option is checked.
fs::path checked_out_dir(const PrepareOptions& opt) {
  if (opt.out_dir.empty()) user_error("prepare: no output directory given");
  fs::path out = fs::path(opt.out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "data/" -> "data"
  std::error_code ec;
  if (fs::exists(fs::symlink_status(out, ec)) && !opt.force) {
    user_error("output directory {} already exists (pass --force to replace it)", out.string());
  }
  if (!(opt.val_fraction >= 0.0 && opt.val_fraction < 1.0)) {
    user_error("prepare: val_fraction is {}, expected a value in [0, 1)", opt.val_fraction);
  }
  if (opt.tokenizer_model.empty() && opt.vocab_size <= 0) {
    user_error("prepare: vocab_size is {}, expected a positive number", opt.vocab_size);
  }
  if (opt.memory_mb < 16) user_error("prepare: memory_mb is {}, expected at least 16 (MiB)", opt.memory_mb);
  if (opt.threads < 0) user_error("prepare: threads is {}, expected 0 (every core) or more", opt.threads);
  return out;
}

// --chat-template: a name, or auto (the family of the given tokenizer's chat_template).
ChatTemplate chosen_template(const PrepareOptions& opt, const std::optional<Tokenizer>& given) {
  if (opt.chat_template != "auto") return chat_template_from_name(opt.chat_template);
  if (!given)
    user_error("prepare: --chat-template auto reads the template of the tokenizer's tokenizer_config.json: give "
               "--tokenizer (a Hugging Face model directory), or name the template (plain, llama2, llama3, chatml)");
  const std::string& file = given->chat_template_file();
  return recognize_chat_template(given->chat_template_source(),
                                 file.empty() ? (fs::path(given->path()).parent_path() / "tokenizer_config.json").string()
                                              : file);
}

// A chat template's special markers are single ids in the tokenizers made for it (Qwen's
// <|im_start|>, Llama 3's <|eot_id|>). A given tokenizer that splits them into ordinary pieces
// trains on them as text: not wrong, but rarely what was meant, so it is said. (Llama 2's [INST]
// is text in its own tokenizer too; a tokenizer prepare trains has no special pieces.)
void warn_of_split_markers(const Tokenizer& tok, ChatTemplate chat) {
  std::vector<const char*> markers;
  if (chat == ChatTemplate::kChatML) markers = {"<|im_start|>", "<|im_end|>"};
  if (chat == ChatTemplate::kLlama3) markers = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  for (const char* m : markers) {
    const size_t n = tok.encode_continuation(m).size();
    if (n > 1)
      fmt::print(stderr, "prepare: warning: {} has no single piece for the {} marker {} (it becomes {} tokens, "
                         "learned as text); the template's own tokenizer holds it as one added token\n",
                 tok.path(), chat_template_name(chat), m, n);
  }
}

// An interrupted prepare left its temporary directory: say so (it may be large), but leave it to
// the user, since a prepare on another machine sharing this file system may still be writing it.
void warn_of_leftovers(const fs::path& out) {
  std::error_code ec;
  const std::string prefix = out.filename().string() + ".tmp-";
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH)
      fmt::print(stderr, "prepare: {} is left from an interrupted prepare (process {} is gone here): remove it\n",
                 e.path().string(), pid);
  }
}

// Memory: up to `live` chunks of chunk_bytes of text are in the pipeline at once, each with its
// tokens (about as many bytes again) and at most one document of max_doc bytes over: at most
// 3/4 of the limit; the tokenizer's sample takes a quarter. The chunks are much smaller than
// that bound allows: what is in flight is then small beside the process's fixed memory however
// long the run (bigger chunks let the peak creep up with the corpus), and a chunk of 2 MiB
// holds thousands of documents, plenty to keep every thread busy. Only the memory limit
// decides where documents are cut, so the dataset is the same on every machine.
struct Budget {
  uint64_t memory = 0;
  size_t max_doc = 0, chunk_bytes = 0, live = 0;
  int threads = 1;
};
Budget budget_of(const PrepareOptions& opt) {
  Budget b;
  b.memory = static_cast<uint64_t>(opt.memory_mb) << 20;
  b.max_doc = b.memory / 64, b.chunk_bytes = b.memory / 256;
  b.threads = opt.threads > 0 ? opt.threads : tbb::this_task_arena::max_concurrency();
  b.live = static_cast<size_t>(std::clamp(2 * b.threads, 2, 8));
  return b;
}

// Pass 1: every document's split key, counted into the split rule; the tokenizer's training
// sentences when one is trained.
SplitRule split_pass(const std::vector<Input>& inputs, ChatTemplate chat, const PrepareOptions& opt, const Budget& b,
                     uint64_t total_bytes, SentenceSample* sample, PrepareReport& report) {
  SplitCounts counts;
  Progress splitting("splitting into train and validation", total_bytes, "B");
  DocumentStream docs(inputs, chat, opt.skip_bad, b.max_doc);
  Document d;
  while (docs.next(&d)) {
    check_stop();
    const double key = split_key(d, opt.seed);
    counts.add(key, opt.val_fraction);
    if (sample) sample->add(d.text, key);
    splitting.set(docs.bytes_read());
  }
  report.n_bad_records = docs.n_bad();
  report.n_docs_cut = docs.n_cut();
  report.record_forms = describe_forms(docs.record_forms());
  return split_rule(counts, opt.val_fraction, report.n_bad_records);
}

// Pass 2: read -> tokenize (every core) -> append, in input order, into the two splits.
void tokenize_pass(const std::vector<Input>& inputs, ChatTemplate chat, const PrepareOptions& opt, const Budget& b,
                   uint64_t total_bytes, const SplitRule& rule, const Tokenizer& tok, bool masked, SplitOut& train,
                   SplitOut& val) {
  struct Chunk {
    std::vector<Document> docs;
    std::vector<char> is_val;
    std::vector<MaskedTokens> enc;
    uint64_t bytes_read = 0;  // of the inputs, when the chunk was complete
  };
  const int eos_id = tok.eos_id();
  Progress tokenizing("tokenizing", total_bytes, "B", "tokens");
  DocumentStream docs(inputs, chat, /*skip_bad=*/true, b.max_doc);  // pass 1 refused what skip_bad does not allow
  tbb::task_arena arena(b.threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        b.live,
        tbb::make_filter<void, std::shared_ptr<Chunk>>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> std::shared_ptr<Chunk> {
              auto c = std::make_shared<Chunk>();
              size_t bytes = 0;
              Document d;
              check_stop();  // a signal cancels the pipeline; the staging directory goes with it
              while (bytes < b.chunk_bytes && docs.next(&d)) {
                bytes += d.text.size();
                c->is_val.push_back(rule.is_val(split_key(d, opt.seed)));
                c->docs.push_back(std::move(d));
                d = Document();
              }
              if (c->docs.empty()) {
                fc.stop();
                return nullptr;
              }
              c->bytes_read = docs.bytes_read();
              return c;
            }) &
            tbb::make_filter<std::shared_ptr<Chunk>, std::shared_ptr<Chunk>>(
                tbb::filter_mode::parallel,
                [&](std::shared_ptr<Chunk> c) {
                  c->enc.resize(c->docs.size());
                  tbb::parallel_for(size_t{0}, c->docs.size(), [&](size_t i) {
                    Document& d = c->docs[i];
                    MaskedTokens& e = c->enc[i];
                    try {
                      if (!d.pieces.empty()) {
                        e = tokenize_chat(d.pieces, tok);
                      } else {
                        e.ids = tok.encode(d.text);
                        e.ids.push_back(eos_id);
                        if (masked) e.target.assign(e.ids.size(), 1);
                      }
                    } catch (const UserError& err) {  // which input, and which tokenizer
                      user_error("{}: the document ending there cannot be tokenized with {}: {}", d.source, tok.path(),
                                 err.what());
                    }
                    d = Document();  // the text is no longer needed
                  });
                  return c;
                }) &
            tbb::make_filter<std::shared_ptr<Chunk>, void>(
                tbb::filter_mode::serial_in_order, [&](std::shared_ptr<Chunk> c) {
                  uint64_t n = 0;
                  for (size_t i = 0; i < c->enc.size(); ++i) {
                    (c->is_val[i] ? val : train).add(c->enc[i]);
                    n += c->enc[i].ids.size();
                  }
                  tokenizing.add_also(n);
                  tokenizing.set(c->bytes_read);
                }));
  });
  train.flush();
  val.flush();
}

// tokens.h5 in the staging directory from the splits' raw files. A full file system is refused
// first, before HDF5 writes: a write failing inside HDF5 leaves a file it may crash on when
// closing. The raw files are deleted as they are copied, so the copy needs the largest of them at
// most, plus a MiB for metadata.
void write_tokens_file(const fs::path& dir, const PrepareOptions& opt, const PrepareReport& report, ChatTemplate chat,
                       const Tokenizer& tok, const fs::path& model_path, const SplitOut& train, const SplitOut& val) {
  const std::string h5_path = (dir / kTokensFile).string();
  uint64_t need = 0;
  for (const SplitOut* s : {&train, &val}) {
    need = std::max({need, s->tokens.bytes(), s->offsets.bytes(), s->mask ? s->mask->bytes() : 0});
  }
  need += uint64_t{1} << 20;
  struct statvfs sv {};
  if (::statvfs(dir.c_str(), &sv) == 0 && static_cast<uint64_t>(sv.f_bavail) * static_cast<uint64_t>(sv.f_frsize) < need)
    user_error("prepare: {}: {} free, writing the dataset needs about {} more (No space left on device)",
               opt.out_dir, format_bytes(static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize), format_bytes(need));
  std::string sources;
  for (const std::string& s : report.sources) sources += (sources.empty() ? "" : "\n") + s;
  quiet_hdf5();
  Progress writing(std::string("writing ") + kTokensFile);
  try {
    H5::H5File file(h5_path, H5F_ACC_EXCL);
    write_split(file, Split::kTrain, train);
    write_split(file, Split::kVal, val);
    write_attr(file, "format_version", kFormatVersion);
    write_attr(file, "vocab_size", int64_t{tok.vocab_size()});
    write_attr(file, "bos_id", int64_t{tok.bos_id()});
    write_attr(file, "eos_id", int64_t{tok.eos_id()});
    write_attr(file, "tokenizer", model_path.filename().string());
    write_attr(file, "tokenizer_xxh64", hex_xxh64(read_file(model_path.string(), "tokenizer")));
    write_attr(file, "val_fraction", opt.val_fraction);
    write_attr(file, "seed", opt.seed);
    write_attr(file, "sources", sources);
    write_attr(file, "unigram_val_loss", report.unigram_val_loss);
    if (report.instruct) write_attr(file, "chat_template", std::string(chat_template_name(chat)));
    file.close();
  } catch (const H5::Exception& e) {
    rethrow_hdf5(e, h5_path, "cannot write dataset file");
  }
}

}  // namespace

PrepareReport prepare_dataset(const PrepareOptions& opt) {
  const fs::path out = checked_out_dir(opt);
  // A given tokenizer is read (and checked) before anything else: `auto` takes its chat template.
  const std::optional<Tokenizer> given =
      opt.tokenizer_model.empty() ? std::nullopt : std::make_optional(Tokenizer::load(opt.tokenizer_model));
  const ChatTemplate chat = chosen_template(opt, given);
  warn_of_leftovers(out);
  const Budget budget = budget_of(opt);

  PrepareReport report;
  report.chat_template = chat_template_name(chat);
  const std::vector<Input> inputs = list_inputs(opt.inputs);
  uint64_t total_bytes = 0;
  for (const Input& in : inputs) {
    total_bytes += in.bytes;
    report.sources.push_back(in.path.string());
    report.instruct |= in.format == InputFormat::kChatJsonl;
  }
  report.bytes_read = total_bytes;
  if (given && report.instruct) warn_of_split_markers(*given, chat);

  const bool train_tokenizer = opt.tokenizer_model.empty();
  SentenceSample sample(budget.memory / 4);
  const SplitRule rule =
      split_pass(inputs, chat, opt, budget, total_bytes, train_tokenizer ? &sample : nullptr, report);

  std::error_code ec;
  fs::create_directories(out.parent_path().empty() ? fs::path(".") : out.parent_path(), ec);
  StagingDir staging(out);
  fs::path model_path = staging.path() / kSpmTokenizerFile;

  // Tokenizer: trained on the train split only, so validation stays unseen. A given one is copied
  // with the config files beside it (special ids, chat template).
  if (train_tokenizer) {
    std::vector<std::string> sentences = sample.take([&](double key) { return !rule.is_val(key); });
    report.tokenizer_sentences = static_cast<int64_t>(sentences.size());
    Progress training(fmt::format("training the tokenizer (BPE, vocabulary {}, {} sentences)", opt.vocab_size,
                                  sentences.size()));
    Tokenizer::train_bpe_sentences(sentences, opt.vocab_size, model_path.string());
  } else {
    model_path = copy_tokenizer_files(given->path(), staging.path().string()).front();
  }
  const std::optional<Tokenizer> trained =
      train_tokenizer ? std::make_optional(Tokenizer::load(model_path.string())) : std::nullopt;
  const Tokenizer& tok = trained ? *trained : *given;
  const int vocab = tok.vocab_size();
  if (tok.eos_id() < 0) {
    user_error(
        "tokenizer {} has no end-of-sequence piece (expected eos_id >= 0; documents "
        "are separated by EOS)",
        opt.tokenizer_model.empty() ? model_path.string() : given->path());
  }

  const bool wide = vocab > 65536, masked = report.instruct;
  SplitOut train(staging.path(), Split::kTrain, wide, masked, vocab);
  SplitOut val(staging.path(), Split::kVal, wide, masked, vocab);
  const auto t0 = std::chrono::steady_clock::now();
  tokenize_pass(inputs, chat, opt, budget, total_bytes, rule, tok, masked, train, val);
  report.tokenize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  report.n_docs_train = static_cast<int64_t>(train.n_docs);
  report.n_docs_val = static_cast<int64_t>(val.n_docs);
  report.n_tokens_train = static_cast<int64_t>(train.n_tokens);
  report.n_tokens_val = static_cast<int64_t>(val.n_tokens);
  report.vocab_size = vocab;
  report.n_targets_train = train.targets;
  report.n_targets_val = val.targets;
  report.unigram_val_loss = unigram_loss(train, val);
  write_tokens_file(staging.path(), opt, report, chat, tok, model_path, train, val);
  staging.commit(opt.force);
  return report;
}

}  // namespace bcd
