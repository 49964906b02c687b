// Instruction records (JSONL) in the layouts users bring: prompt/response, OpenAI-style messages,
// Alpaca, ShareGPT and LIMA-style conversations (as LLaMA-Factory reads them), all to one
// ChatRecord validated by one set of rules.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_read.h"
#include "base/printable.h"
#include "data/chat.h"

namespace bcd {

namespace {

using nlohmann::json;

constexpr const char* kSpace = " \t\n\r\f\v";

bool is_blank(std::string_view s) { return s.find_first_not_of(kSpace) == std::string_view::npos; }

// Where a record is, for error messages: "FILE:LINE".
struct Where {
  const std::string& file;
  int64_t line;
};

// What it says of the record (a role, JSON's "last read" bytes) is escaped: a record may hold
// invalid UTF-8 and a terminal's control sequences (base/printable.h).
template <typename... Args>
[[noreturn]] void record_error(const Where& w, fmt::format_string<Args...> f, Args&&... args) {
  user_error("{}:{}: {}", w.file, w.line, printable_line(fmt::format(f, std::forward<Args>(args)...)));
}

// "null", "a number", "an array", ...: a JSON value's type as a sentence says it.
std::string describe(const json& j) {
  if (j.is_null()) return "null";
  return fmt::format("{} {}", j.is_array() || j.is_object() ? "an" : "a", j.type_name());
}

// The string at obj[key], `what` naming it in errors; null is allowed (and gives "") only
// when `null_ok`.
std::string string_field(const Where& w, const json& obj, const char* key, const std::string& what,
                         bool null_ok = false) {
  auto it = obj.find(key);
  if (it == obj.end()) record_error(w, "{} has no \"{}\"; expected a string there", what, key);
  if (it->is_null() && null_ok) return {};
  if (!it->is_string()) {
    record_error(w, "{} \"{}\" is {}; expected a string{}", what, key, describe(*it),
                 null_ok ? " or null" : "");
  }
  return it->get<std::string>();
}

// A string element of an array, `what` naming it.
std::string string_item(const Where& w, const json& v, const std::string& what) {
  if (!v.is_string()) record_error(w, "{} is {}; expected a string", what, describe(v));
  return v.get<std::string>();
}

void check_not_blank(const Where& w, const ChatMessage& m, const std::string& what) {
  if (is_blank(m.content)) {
    record_error(w, "{} ({}) has {} content; expected text with a non-whitespace character", what,
                 m.role, m.content.empty() ? "empty" : "whitespace-only");
  }
}

// A message and the name errors give it ("message 3", "\"history\"[1][0]").
struct Turn {
  ChatMessage msg;
  std::string what;
};

// The rules every form shares: a system message first or nowhere (dropped when blank); then
// user and assistant alternate, user first, with non-blank content; the assistant's is last.
ChatRecord check_turns(const Where& w, std::vector<Turn> turns) {
  ChatRecord r;
  size_t n_dialog = 0;  // user and assistant messages so far
  for (size_t i = 0; i < turns.size(); ++i) {
    Turn& t = turns[i];
    if (t.msg.role == "system") {
      if (i != 0) record_error(w, "{} has role \"system\"; expected a system message only first", t.what);
      if (is_blank(t.msg.content)) continue;
    } else {
      const char* want = n_dialog++ % 2 == 0 ? "user" : "assistant";
      if (t.msg.role != want) {
        record_error(w, "{} has role \"{}\"; expected \"{}\" (user and assistant alternate, "
                        "user first, after an optional system message)",
                     t.what, t.msg.role, want);
      }
      check_not_blank(w, t.msg, t.what);
    }
    r.messages.push_back(std::move(t.msg));
  }
  if (r.messages.empty() || r.messages.back().role != "assistant") {
    record_error(w, "the last message ({}) is not the assistant's; expected the conversation "
                    "to end with an assistant message to train on",
                 r.messages.empty() ? "system" : r.messages.back().role);
  }
  return r;
}

// An optional top-level "system" string (null or blank: none), as the first turn.
void system_turn(const Where& w, const json& j, std::vector<Turn>& turns) {
  if (!j.contains("system")) return;
  std::string sys = string_field(w, j, "system", "the record", /*null_ok=*/true);
  if (!is_blank(sys)) turns.push_back({{"system", std::move(sys)}, "\"system\""});
}

// ---- The forms ----

// {"prompt": str, "response": str, "system": str (optional)}
ChatRecord parse_prompt_form(const Where& w, const json& j) {
  if (!j.contains("prompt")) record_error(w, "the record has \"response\" but no \"prompt\"; expected both strings");
  if (!j.contains("response")) record_error(w, "the record has \"prompt\" but no \"response\"; expected both strings");
  std::vector<Turn> turns;
  system_turn(w, j, turns);
  turns.push_back({{"user", string_field(w, j, "prompt", "the record")}, "\"prompt\""});
  turns.push_back({{"assistant", string_field(w, j, "response", "the record")}, "\"response\""});
  return check_turns(w, std::move(turns));
}

// {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}
ChatRecord parse_messages_form(const Where& w, const json& j) {
  const json& msgs = j.at("messages");
  if (!msgs.is_array()) {
    record_error(w, "\"messages\" is {}; expected an array of {{\"role\", \"content\"}} objects",
                 describe(msgs));
  }
  if (msgs.empty()) record_error(w, "\"messages\" is empty; expected user and assistant messages");
  std::vector<Turn> turns;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string what = fmt::format("message {}", i + 1);
    const json& m = msgs[i];
    if (!m.is_object()) {
      record_error(w, "{} is {}; expected an object with \"role\" and \"content\"", what, describe(m));
    }
    ChatMessage msg{string_field(w, m, "role", what), string_field(w, m, "content", what)};
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      record_error(w, "{} has role \"{}\"; expected \"system\", \"user\" or \"assistant\"", what, msg.role);
    turns.push_back({std::move(msg), what});
  }
  return check_turns(w, std::move(turns));
}

// Alpaca, as LLaMA-Factory reads it: {"instruction": str, "input": str (optional), "output":
// str, "system": str (optional), "history": [[instruction, output], ...] (optional, earlier
// turns)}. The user's turn is the instruction, a newline and the input (when not empty).
ChatRecord parse_alpaca_form(const Where& w, const json& j) {
  if (!j.contains("instruction"))
    record_error(w, "the record has \"output\" but no \"instruction\"; expected both strings (Alpaca)");
  if (!j.contains("output"))
    record_error(w, "the record has \"instruction\" but no \"output\"; expected both strings (Alpaca)");
  std::vector<Turn> turns;
  system_turn(w, j, turns);
  if (j.contains("history") && !j["history"].is_null()) {
    const json& h = j["history"];
    if (!h.is_array())
      record_error(w, "\"history\" is {}; expected an array of [instruction, output] pairs", describe(h));
    for (size_t i = 0; i < h.size(); ++i) {
      const std::string what = fmt::format("\"history\"[{}]", i);
      if (!h[i].is_array() || h[i].size() != 2)
        record_error(w, "{} is {}; expected an [instruction, output] pair of strings", what,
                     h[i].is_array() ? fmt::format("an array of {}", h[i].size()) : describe(h[i]));
      turns.push_back({{"user", string_item(w, h[i][0], what + "[0]")}, what + "[0]"});
      turns.push_back({{"assistant", string_item(w, h[i][1], what + "[1]")}, what + "[1]"});
    }
  }
  std::string user = string_field(w, j, "instruction", "the record");
  const std::string input = j.contains("input") ? string_field(w, j, "input", "the record", /*null_ok=*/true) : "";
  if (!input.empty()) user += "\n" + input;
  turns.push_back({{"user", std::move(user)}, "\"instruction\""});
  turns.push_back({{"assistant", string_field(w, j, "output", "the record")}, "\"output\""});
  return check_turns(w, std::move(turns));
}

// ShareGPT, as LLaMA-Factory reads it: {"conversations": [{"from": "human"|"gpt"|"system",
// "value": str}, ...], "system": str (optional)}; "user"/"assistant" are taken as well. Tool
// turns (function_call, observation) are refused by name: no template here lays them out.
ChatRecord parse_sharegpt_form(const Where& w, const json& conv, const json& j) {
  std::vector<Turn> turns;
  system_turn(w, j, turns);
  for (size_t i = 0; i < conv.size(); ++i) {
    const std::string what = fmt::format("\"conversations\"[{}]", i);
    const json& m = conv[i];
    if (!m.is_object())
      record_error(w, "{} is {}; expected an object with \"from\" and \"value\" (ShareGPT)", what, describe(m));
    const std::string from = string_field(w, m, "from", what);
    std::string role;
    if (from == "human" || from == "user") role = "user";
    else if (from == "gpt" || from == "assistant") role = "assistant";
    else if (from == "system") role = "system";
    else if (from == "function_call" || from == "observation" || from == "function" || from == "tool")
      record_error(w, "{} is from \"{}\": tool turns are not supported; expected \"human\", \"gpt\" or \"system\"",
                   what, from);
    else
      record_error(w, "{} is from \"{}\"; expected \"human\" (or \"user\"), \"gpt\" (or \"assistant\") or \"system\"",
                   what, from);
    // A "system" from the record comes first; a system turn inside the conversation after it is
    // then not first, and refused as in every form.
    turns.push_back({{role, string_field(w, m, "value", what)}, what});
  }
  return check_turns(w, std::move(turns));
}

// LIMA's own layout: {"conversations": [user, assistant, user, assistant, ...]} as strings.
ChatRecord parse_conversations_form(const Where& w, const json& conv, const json& j) {
  std::vector<Turn> turns;
  system_turn(w, j, turns);
  for (size_t i = 0; i < conv.size(); ++i) {
    const std::string what = fmt::format("\"conversations\"[{}]", i);
    turns.push_back({{i % 2 == 0 ? "user" : "assistant", string_item(w, conv[i], what)}, what});
  }
  return check_turns(w, std::move(turns));
}

// Forms one file may mix: prompt/response and messages, bcdtrain's own two (files written before
// the other forms were read mix them, and so does scripts/fortune_qa.py).
bool same_family(RecordForm a, RecordForm b) {
  auto native = [](RecordForm f) { return f == RecordForm::kPrompt || f == RecordForm::kMessages; };
  return a == b || (native(a) && native(b));
}

// Which form a record is in, from its keys; UserError for none or two.
RecordForm form_of(const Where& w, const json& j) {
  std::vector<std::pair<RecordForm, const char*>> found;  // the form and the key that says so
  if (j.contains("messages")) found.push_back({RecordForm::kMessages, "messages"});
  if (j.contains("prompt") || j.contains("response"))
    found.push_back({RecordForm::kPrompt, j.contains("prompt") ? "prompt" : "response"});
  if (j.contains("instruction") || j.contains("output"))
    found.push_back({RecordForm::kAlpaca, j.contains("instruction") ? "instruction" : "output"});
  if (j.contains("conversations")) {
    const json& c = j["conversations"];
    if (!c.is_array() || c.empty())
      record_error(w, "\"conversations\" is {}; expected a non-empty array of {{\"from\", \"value\"}} objects "
                      "(ShareGPT) or of strings (LIMA)",
                   c.is_array() ? "empty" : describe(c));
    found.push_back({c.front().is_string() ? RecordForm::kConversations : RecordForm::kShareGpt, "conversations"});
  }
  if (found.empty())
    record_error(w, "the record has neither \"messages\" nor \"prompt\" (nor \"instruction\" or \"conversations\"); "
                    "expected one of the forms: {}",
                 record_form_list());
  if (found.size() > 1)
    record_error(w, "the record has \"{}\" and \"{}\" (the {} and {} forms); expected one form", found[0].second,
                 found[1].second, record_form_name(found[0].first), record_form_name(found[1].first));
  return found.front().first;
}

}  // namespace

const char* record_form_name(RecordForm f) {
  switch (f) {
    case RecordForm::kPrompt: return "prompt/response";
    case RecordForm::kMessages: return "messages";
    case RecordForm::kAlpaca: return "Alpaca";
    case RecordForm::kShareGpt: return "ShareGPT";
    case RecordForm::kConversations: return "LIMA conversations";
  }
  return "?";
}

std::string record_form_list() {
  return "{\"prompt\", \"response\"}, {\"messages\": [{\"role\", \"content\"}]}, Alpaca {\"instruction\", "
         "\"input\", \"output\"}, ShareGPT {\"conversations\": [{\"from\", \"value\"}]} or LIMA "
         "{\"conversations\": [strings]}";
}

ChatRecord parse_chat_record(std::string_view line, const std::string& file, int64_t line_no, FileForm* file_form) {
  const Where w{file, line_no};
  json j;
  try {
    j = parse_json(line, kJsonlRecord, fmt::format("{}:{}", file, line_no));
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 7: <why>";
    // the line within our one-line text would only confuse next to FILE:LINE
    const char* at = std::strstr(e.what(), "column ");
    const char* why = at ? std::strstr(at, ": ") : nullptr;
    record_error(w, "not valid JSON at column {} ({}); expected one JSON object per line", e.byte,
                 why ? why + 2 : e.what());
  }
  if (!j.is_object()) record_error(w, "the line is {}; expected a JSON object", describe(j));
  const RecordForm form = form_of(w, j);
  if (file_form && file_form->line > 0 && !same_family(file_form->form, form))
    record_error(w, "a record in the {} form; the file's records are in the {} form (its first record, line {}): "
                    "expected one form per file",
                 record_form_name(form), record_form_name(file_form->form), file_form->line);
  if (form == RecordForm::kMessages && j.contains("system"))
    record_error(w, "the record has \"messages\" and \"system\"; expected the system prompt as the first of "
                    "\"messages\" (role \"system\")");
  ChatRecord r;
  switch (form) {
    case RecordForm::kPrompt: r = parse_prompt_form(w, j); break;
    case RecordForm::kMessages: r = parse_messages_form(w, j); break;
    case RecordForm::kAlpaca: r = parse_alpaca_form(w, j); break;
    case RecordForm::kShareGpt: r = parse_sharegpt_form(w, j["conversations"], j); break;
    case RecordForm::kConversations: r = parse_conversations_form(w, j["conversations"], j); break;
  }
  if (file_form && file_form->line == 0) *file_form = {form, line_no};  // the first valid record's
  return r;
}

std::vector<ChatRecord> read_chat_jsonl(const std::string& path, bool skip_bad, int64_t* n_bad) {
  BCD_CHECK(!skip_bad || n_bad != nullptr, "skip_bad needs a counter");
  if (n_bad) *n_bad = 0;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    user_error("chat data file {} is a directory; expected a JSONL file", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error("cannot open chat data file {}: {}", path, std::strerror(errno));
  std::vector<ChatRecord> out;
  std::string line;
  FileForm form;
  for (int64_t line_no = 1; read_json_line(in, &line, kJsonlRecord, path, line_no); ++line_no) {
    if (is_blank(line)) continue;
    if (!skip_bad) {
      out.push_back(parse_chat_record(line, path, line_no, &form));
      continue;
    }
    try {
      out.push_back(parse_chat_record(line, path, line_no, &form));
    } catch (const UserError&) {
      ++*n_bad;
    }
  }
  // getline sets failbit (with eofbit) at the end; badbit means the read itself failed
  if (in.bad()) user_error("cannot read chat data file {}: {}", path, std::strerror(errno));
  return out;
}

}  // namespace bcd
