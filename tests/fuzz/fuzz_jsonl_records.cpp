// libFuzzer entry: any byte string as a JSONL file of instruction records, each line read as
// prepare reads it (parse_chat_record, the file's record form carried from line to line) and as
// a bounded JSON record. UserError is the expected answer to bad input; any other exception, a
// sanitizer report or a crash is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/json_read.h"
#include "data/chat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  bcd::FileForm form;
  int64_t line_no = 0;
  for (size_t at = 0; at <= text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos) continue;  // skipped, as the readers do
    try {
      const bcd::ChatRecord r = bcd::parse_chat_record(line, "fuzz.jsonl", line_no, &form);
      // A record's promise (data/chat.h): at least a user and an assistant turn, the last the assistant's.
      if (r.messages.size() < 2 || r.messages.back().role != "assistant") __builtin_trap();
    } catch (const bcd::UserError&) {
    }
    try {
      bcd::parse_json(line, bcd::kJsonlRecord, "fuzz.jsonl:" + std::to_string(line_no), /*allow_exceptions=*/false);
    } catch (const bcd::UserError&) {
    }
  }
  return 0;
}
