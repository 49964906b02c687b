// The documents of `bcdtrain prepare`'s inputs, read a block at a time: which files a list of
// paths means, what format each file is in, and a stream handing out their documents one by one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/chat.h"

namespace bcd {

enum class InputFormat { kParagraphs, kFortune, kTextJsonl, kChatJsonl };

struct Input {
  std::filesystem::path path;
  InputFormat format;
  uint64_t bytes;
};

// The files `paths` name, in order (a directory's plain files sorted by name; fortune indexes
// .dat/.u8, hidden files and symlinks in directories skipped), each with its format: a fortune
// file holds a line of only "%" within its first 64 MiB; a .jsonl file holds text records when
// its first record is an object with a "text" string and no "prompt" or "messages", else
// instruction records. UserError naming a path that is missing or unreadable, or when no file
// is left.
std::vector<Input> list_inputs(const std::vector<std::string>& paths);

// A document: plain text (no pieces: all of it, and its EOS, are targets) or an instruction
// record as its chat template lays it out (the pieces end with an EOS).
struct Document {
  std::string text;               // what trains a tokenizer (and decides the split of plain text)
  std::vector<ChatPiece> pieces;  // instruction records only
  // Instruction records: what decides the split, the record's roles and contents, so a record
  // is held out or trained on whichever template lays it out.
  std::string split_key;
  std::string source;  // where it ends: "FILE:LINE" (what an error tokenizing it names)
};

// The documents of the inputs, in order, one at a time. Text files: a fortune file's records
// between "%" lines, another file's paragraphs between blank lines, each trimmed, empty ones
// dropped. .jsonl files: a record a line (blank lines skipped). A text document that would grow
// past max_doc bytes is cut before the line that would take it there (a line longer than that
// comes in pieces of max_doc bytes), so no document is longer.
class DocumentStream {
 public:
  DocumentStream(const std::vector<Input>& inputs, ChatTemplate chat, bool skip_bad, size_t max_doc);
  ~DocumentStream();
  DocumentStream(const DocumentStream&) = delete;
  DocumentStream& operator=(const DocumentStream&) = delete;

  // The next document; false after the last one. A bad .jsonl record is a UserError naming its
  // file and line, or (skip_bad) counted and skipped.
  bool next(Document* d);
  int64_t n_bad() const;
  int64_t n_cut() const;  // cuts made in over-long documents
  uint64_t bytes_read() const;
  // The record form of each instruction .jsonl file read so far (its first valid record's),
  // in input order; files with no valid record are absent.
  const std::vector<std::pair<std::string, RecordForm>>& record_forms() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bcd
