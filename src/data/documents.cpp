// The documents of prepare's inputs: a LineReader hands out a file's lines from 1 MiB reads, and
// DocumentStream cuts them into documents by the file's format.
#include "data/documents.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <system_error>

#include "base/bytes.h"
#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"

namespace bcd {

namespace fs = std::filesystem;

namespace {

constexpr size_t kReadBlock = size_t{1} << 20;          // bytes per read() of an input
constexpr uint64_t kFortuneSniff = uint64_t{64} << 20;  // a "%" line this early: a fortune file

// Directories contribute their plain files, sorted by name; fortune-style indexes (.dat, .u8),
// hidden files and symlinks are skipped so `/usr/share/games/fortunes` works as is.
std::vector<fs::path> list_input_files(const std::vector<std::string>& inputs) {
  if (inputs.empty()) user_error("prepare: no inputs given (expected files or directories)");
  std::vector<fs::path> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(input, ec);
    if (!fs::exists(st))
      user_error("input {} does not exist (expected a file or directory)", input);
    if (fs::is_regular_file(st)) {
      files.emplace_back(input);
      continue;
    }
    if (!fs::is_directory(st)) {
      user_error("input {} is neither a regular file nor a directory", input);
    }
    std::vector<fs::path> found;
    for (const fs::directory_entry& e : fs::directory_iterator(input, ec)) {
      std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.') continue;
      auto ends_with = [&](std::string_view suffix) {
        return name.size() >= suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
      };
      if (ends_with(".dat") || ends_with(".u8")) continue;
      std::error_code ec2;
      if (e.is_symlink(ec2) || !e.is_regular_file(ec2)) continue;
      found.push_back(e.path());
    }
    if (ec) user_error("cannot list input directory {}: {}", input, ec.message());
    std::sort(found.begin(), found.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) {
    user_error(
        "prepare: the inputs hold no plain files (hidden, .dat, .u8 and symlinked files "
        "in directories are skipped)");
  }
  return files;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

bool is_percent_line(std::string_view line) { return line == "%" || line == "%\r"; }

[[noreturn]] void io_error(const char* what, const std::string& path) {
  user_error("prepare: cannot {} {}: {}", what, path, std::strerror(errno));
}

// A file's lines (without their '\n', or "\r\n"; the first without a UTF-8 byte-order mark),
// read in blocks. A line longer than max_line comes in pieces of at most max_line bytes, cut at a
// UTF-8 character boundary; `whole` is false on every piece but the line's last. The view stays
// valid until the next call.
class LineReader {
 public:
  LineReader(std::string path, size_t max_line) : path_(std::move(path)), max_line_(max_line) {
    fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd_) io_error("open", path_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool next(std::string_view* line, bool* whole) {
    for (;;) {
      // a '\n' at begin_ + max_line_ still ends a line of max_line_ bytes
      const size_t limit = std::min(end_, begin_ + max_line_ + 1);
      if (scan_ < limit) {
        const void* nl = std::memchr(buf_.data() + scan_, '\n', limit - scan_);
        if (nl) {
          const auto at = static_cast<size_t>(static_cast<const char*>(nl) - buf_.data());
          return hand_out(at - begin_, at + 1, true, line, whole);
        }
        scan_ = limit;
      }
      if (end_ - begin_ > max_line_) {  // no '\n' in the first max_line_ + 1 bytes: a piece
        size_t cut = max_line_;
        // 10xxxxxx is a UTF-8 continuation byte: step back to the start of the character
        while (cut > 0 && (static_cast<unsigned char>(buf_[begin_ + cut]) & 0xC0) == 0x80) --cut;
        if (cut == 0) cut = max_line_;  // not UTF-8 at all; any cut will do
        return hand_out(cut, begin_ + cut, false, line, whole);
      }
      if (eof_) return begin_ < end_ && hand_out(end_ - begin_, end_, true, line, whole);
      fill();
    }
  }
  int64_t line_no() const { return line_no_; }  // 1-based, of the line last handed out
  uint64_t bytes_read() const { return read_; }
  const std::string& path() const { return path_; }

 private:
  bool hand_out(size_t len, size_t next_begin, bool whole, std::string_view* line, bool* w) {
    if (!continued_) ++line_no_;
    *line = std::string_view(buf_.data() + begin_, len);
    // A file from Windows: a UTF-8 byte-order mark before its first line and "\r\n" line ends
    // are the file's, not its text (they would become tokens).
    if (line_no_ == 1 && !continued_ && line->substr(0, 3) == "\xEF\xBB\xBF") line->remove_prefix(3);
    if (whole && !line->empty() && line->back() == '\r') line->remove_suffix(1);
    *w = whole;
    continued_ = !whole;
    begin_ = next_begin;
    scan_ = std::max(scan_, begin_);  // [begin_, scan_) was searched: it holds no '\n'
    return true;
  }
  void fill() {
    if (begin_ > 0) {  // keep the unfinished line, at the front
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      scan_ -= begin_;
      begin_ = 0;
    }
    if (buf_.size() < end_ + kReadBlock) buf_.resize(end_ + kReadBlock);
    ssize_t n;
    do n = ::read(fd_.get(), buf_.data() + end_, buf_.size() - end_);
    while (n < 0 && errno == EINTR);
    if (n < 0) io_error("read", path_);
    if (n == 0) eof_ = true;
    end_ += static_cast<size_t>(n);
    read_ += static_cast<uint64_t>(n);
  }

  std::string path_;
  size_t max_line_;
  UniqueFd fd_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0, scan_ = 0;  // unread bytes [begin_, end_); no '\n' in [begin_, scan_)
  bool eof_ = false, continued_ = false;
  int64_t line_no_ = 0;
  uint64_t read_ = 0;
};

// A fortune file holds a line of only "%" within its first kFortuneSniff bytes. A .jsonl file
// holds text records when its first record is an object with a "text" string and no "prompt"
// or "messages"; otherwise it is instruction data (whose parser then names what is wrong).
InputFormat sniff_format(const fs::path& path) {
  LineReader r(path.string(), kReadBlock);
  std::string_view line;
  bool whole = true;
  if (path.extension() == ".jsonl") {
    while (r.next(&line, &whole)) {
      if (trim(line).empty()) continue;
      if (!whole) return InputFormat::kChatJsonl;
      nlohmann::json j;
      try {
        j = parse_json(line, kJsonlRecord, fmt::format("{}:{}", path.string(), r.line_no()), /*allow_exceptions=*/false);
      } catch (const UserError&) {
        return InputFormat::kChatJsonl;  // past a bound, as a line that is not JSON: its parser names it
      }
      const bool text = j.is_object() && j.contains("text") && j["text"].is_string() && !j.contains("prompt") &&
                        !j.contains("messages") && !j.contains("instruction") && !j.contains("conversations");
      return text ? InputFormat::kTextJsonl : InputFormat::kChatJsonl;
    }
    return InputFormat::kChatJsonl;
  }
  while (r.next(&line, &whole) && r.bytes_read() <= kFortuneSniff + kReadBlock)
    if (whole && is_percent_line(line)) return InputFormat::kFortune;
  return InputFormat::kParagraphs;
}

}  // namespace

std::vector<Input> list_inputs(const std::vector<std::string>& paths) {
  std::vector<Input> out;
  for (const fs::path& f : list_input_files(paths)) {
    std::error_code ec;
    const uint64_t bytes = fs::file_size(f, ec);
    if (ec) user_error("prepare: cannot read input {}: {}", f.string(), ec.message());
    out.push_back(Input{f, sniff_format(f), bytes});
  }
  return out;
}

struct DocumentStream::Impl {
  Impl(const std::vector<Input>& inputs, ChatTemplate chat, bool skip_bad, size_t max_doc)
      : inputs_(inputs), chat_(chat), skip_bad_(skip_bad), max_doc_(max_doc) {}

  bool next(Document* d) {
    for (;;) {
      if (!reader_) {
        if (next_input_ == inputs_.size()) return false;
        const Input& in = inputs_[next_input_++];
        reader_ = std::make_unique<LineReader>(in.path.string(), max_doc_);
        format_ = in.format;
        form_ = FileForm{};
        cur_.clear();
        started_ = continued_ = false;
      }
      const bool got = format_ == InputFormat::kTextJsonl || format_ == InputFormat::kChatJsonl ? next_record(d) : next_text(d);
      if (got) {
        d->source = fmt::format("{}:{}", reader_->path(), reader_->line_no());
        return true;
      }
      done_bytes_ += reader_->bytes_read();
      if (format_ == InputFormat::kChatJsonl && form_.line > 0) forms_.emplace_back(reader_->path(), form_.form);
      reader_.reset();
    }
  }
  int64_t n_bad() const { return n_bad_; }
  int64_t n_cut() const { return n_cut_; }  // cuts made in over-long documents
  uint64_t bytes_read() const { return done_bytes_ + (reader_ ? reader_->bytes_read() : 0); }

  // The next text document of the current file; false at its end.
  bool next_text(Document* d) {
    const bool fortune = format_ == InputFormat::kFortune;
    std::string_view line;
    bool whole = true;
    while (reader_->next(&line, &whole)) {
      const bool piece_of_long_line = continued_;
      continued_ = !whole;
      const bool separator = !piece_of_long_line && whole && (fortune ? is_percent_line(line) : trim(line).empty());
      if (separator) {
        if (take(d)) return true;
        continue;
      }
      const bool newline = started_ && !piece_of_long_line;
      if (started_ && cur_.size() + newline + line.size() > max_doc_) {  // cut before this line
        ++n_cut_;
        const bool got = take(d);
        cur_.assign(line);
        started_ = true;
        if (got) return true;
        continue;
      }
      if (newline) cur_ += '\n';
      cur_.append(line);
      started_ = true;
    }
    return take(d);
  }
  bool take(Document* d) {
    std::string_view doc = trim(cur_);
    const bool any = !doc.empty();
    if (any) {
      d->text.assign(doc);
      d->pieces.clear();
      d->split_key.clear();
    }
    cur_.clear();
    started_ = false;
    return any;
  }

  // The next record of the current .jsonl file; false at its end.
  bool next_record(Document* d) {
    std::string_view line;
    bool whole = true;
    while (reader_->next(&line, &whole)) {
      if (!whole) {  // a record longer than a document may be
        const int64_t line_no = reader_->line_no();
        while (!whole && reader_->next(&line, &whole)) {
        }
        bad(fmt::format("{}:{}: a record of more than {} bytes; expected records below the memory limit's {} "
                        "(raise --memory-mb)",
                        reader_->path(), line_no, max_doc_, format_bytes(max_doc_)));
        continue;
      }
      if (trim(line).empty()) continue;
      try {
        if (format_ == InputFormat::kChatJsonl ? chat_record(line, d) : text_record(line, d)) return true;
      } catch (const UserError& e) {
        bad(e.what());
      }
    }
    return false;
  }
  void bad(const std::string& what) {
    if (!skip_bad_) throw UserError(what);
    ++n_bad_;
  }
  bool chat_record(std::string_view line, Document* d) {
    ChatRecord r = parse_chat_record(line, reader_->path(), reader_->line_no(), &form_);
    d->pieces = render_chat(r, chat_);
    d->text.clear();
    for (const ChatPiece& p : d->pieces) d->text += p.text;
    d->split_key.clear();
    for (const ChatMessage& m : r.messages) d->split_key += m.role + '\x1f' + m.content + '\x1e';
    return true;
  }
  bool text_record(std::string_view line, Document* d) {
    const std::string source = fmt::format("{}:{}", reader_->path(), reader_->line_no());
    nlohmann::json j = parse_json(line, kJsonlRecord, source, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      user_error("{}:{}: {}; expected a JSON object with a \"text\" string (the file's first record has one)",
                 reader_->path(), reader_->line_no(),
                 j.is_discarded() ? "not valid JSON" : j.is_object() ? "no \"text\" string" : "not a JSON object");
    std::string_view text = trim(j["text"].get_ref<const std::string&>());
    if (text.empty()) return false;
    d->text.assign(text);
    d->pieces.clear();
    d->split_key.clear();
    return true;
  }

  const std::vector<Input>& inputs_;
  const ChatTemplate chat_;
  const bool skip_bad_;
  const size_t max_doc_;
  size_t next_input_ = 0;
  std::unique_ptr<LineReader> reader_;
  InputFormat format_ = InputFormat::kParagraphs;
  std::string cur_;                  // the text document being gathered
  bool started_ = false;             // cur_ holds a line
  bool continued_ = false;           // the last piece was not the end of its line
  int64_t n_bad_ = 0, n_cut_ = 0;
  uint64_t done_bytes_ = 0;          // of the inputs already finished
  FileForm form_;                    // the current instruction file's record form
  std::vector<std::pair<std::string, RecordForm>> forms_;  // of the files finished
};

DocumentStream::DocumentStream(const std::vector<Input>& inputs, ChatTemplate chat, bool skip_bad, size_t max_doc)
    : impl_(std::make_unique<Impl>(inputs, chat, skip_bad, max_doc)) {}
DocumentStream::~DocumentStream() = default;
bool DocumentStream::next(Document* d) { return impl_->next(d); }
int64_t DocumentStream::n_bad() const { return impl_->n_bad(); }
int64_t DocumentStream::n_cut() const { return impl_->n_cut(); }
uint64_t DocumentStream::bytes_read() const { return impl_->bytes_read(); }
const std::vector<std::pair<std::string, RecordForm>>& DocumentStream::record_forms() const { return impl_->forms_; }

}  // namespace bcd
