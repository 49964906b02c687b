// Chat templates (plain, Llama 2, Llama 3, ChatML) and their tokenization with response-only
// target masks; the records they lay out are read in data/chat_records.cpp.
#include "data/chat.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/printable.h"

namespace bcd {

namespace {

using nlohmann::json;

constexpr const char* kSpace = " \t\n\r\f\v";

// Python's str.strip() on ASCII whitespace: what Meta's reference code applies to turns.
std::string strip(std::string_view s) {
  size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(kSpace);
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

// ---- Templates ----

namespace {

// Builds a piece list, merging adjacent text of the same target flag.
class PieceList {
 public:
  void text(std::string_view s, bool target) {
    if (s.empty()) return;
    if (!out_.empty() && out_.back().kind == ChatPiece::kText && out_.back().target == target) {
      out_.back().text += s;
    } else {
      out_.push_back({ChatPiece::kText, std::string(s), target});
    }
  }
  void bos() { out_.push_back({ChatPiece::kBos, {}, false}); }
  void eos(bool target) { out_.push_back({ChatPiece::kEos, {}, target}); }
  std::vector<ChatPiece> take() { return std::move(out_); }

 private:
  std::vector<ChatPiece> out_;
};

// A validated record split into its optional system prompt and (user, assistant) turns.
struct Turns {
  const std::string* system = nullptr;
  std::vector<std::pair<const std::string*, const std::string*>> turns;
};

Turns split_turns(const ChatRecord& r) {
  Turns t;
  size_t i = 0;
  if (!r.messages.empty() && r.messages[0].role == "system") t.system = &r.messages[i++].content;
  for (; i + 1 < r.messages.size(); i += 2) {
    BCD_CHECK(r.messages[i].role == "user" && r.messages[i + 1].role == "assistant",
              "chat record not validated: messages {} and {} are {} and {}", i, i + 1,
              r.messages[i].role, r.messages[i + 1].role);
    t.turns.emplace_back(&r.messages[i].content, &r.messages[i + 1].content);
  }
  BCD_CHECK(i == r.messages.size() && !t.turns.empty(),
            "chat record not validated: {} messages do not end with an assistant turn",
            r.messages.size());
  return t;
}

// Our own Alpaca-like layout (Taori et al. 2023, Stanford Alpaca's "### Instruction:" /
// "### Response:" headers) without Alpaca's preamble sentence. EOS ends every response: a text
// marker such as "\n\n" also occurs inside responses and could not tell a generator to stop.
void render_plain(const Turns& t, PieceList* p) {
  p->bos();
  if (t.system) p->text("### System:\n" + *t.system + "\n\n", false);
  for (size_t i = 0; i < t.turns.size(); ++i) {
    if (i > 0) p->text("\n\n", false);
    p->text("### Instruction:\n" + *t.turns[i].first + "\n\n### Response:\n", false);
    p->text(*t.turns[i].second, true);
    p->eos(true);
  }
}

// Meta's Llama 2 chat format, llama/generation.py chat_completion(): per turn
//   BOS "[INST] {user.strip()} [/INST] {assistant.strip()} " EOS
// with the system prompt folded into the first user message as "<<SYS>>\n{sys}\n<</SYS>>\n\n"
// before the strip. The space before the answer goes with the target: in Meta's one-string
// encoding of a turn it is the "▁" of the answer's first token.
void render_llama2(const Turns& t, PieceList* p) {
  for (size_t i = 0; i < t.turns.size(); ++i) {
    std::string user = *t.turns[i].first;
    if (i == 0 && t.system) user = "<<SYS>>\n" + *t.system + "\n<</SYS>>\n\n" + user;
    p->bos();
    p->text("[INST] " + strip(user) + " [/INST]", false);
    p->text(" " + strip(*t.turns[i].second) + " ", true);
    p->eos(true);
  }
}

// Meta's Llama 3 instruct format, llama3/llama/tokenizer.py ChatFormat: BOS stands for
// <|begin_of_text|>; each message is a header "<|start_header_id|>{role}<|end_header_id|>\n\n",
// the stripped content and <|eot_id|>; the generation prompt is the assistant header. Llama 3's
// <|eot_id|> ends a turn; our EOS (their <|end_of_text|>) ends the record.
void render_llama3(const Turns& t, PieceList* p) {
  auto header = [](const char* role) {
    return fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n", role);
  };
  p->bos();
  if (t.system) p->text(header("system") + strip(*t.system) + "<|eot_id|>", false);
  for (const auto& [user, assistant] : t.turns) {
    p->text(header("user") + strip(*user) + "<|eot_id|>" + header("assistant"), false);
    p->text(strip(*assistant) + "<|eot_id|>", true);
  }
  p->eos(true);
}

// ChatML as OpenAI documented it (openai-python chatml.md) and Qwen and others use it:
// "<|im_start|>{role}\n{content}<|im_end|>\n" per message, contents verbatim; the generation
// prompt is "<|im_start|>assistant\n". The newline after <|im_end|> separates messages and is
// not trained; the record's EOS is.
void render_chatml(const Turns& t, PieceList* p) {
  p->bos();
  if (t.system) p->text("<|im_start|>system\n" + *t.system + "<|im_end|>\n", false);
  for (const auto& [user, assistant] : t.turns) {
    p->text("<|im_start|>user\n" + *user + "<|im_end|>\n<|im_start|>assistant\n", false);
    p->text(*assistant + "<|im_end|>", true);
    p->text("\n", false);
  }
  p->eos(true);
}

}  // namespace

ChatTemplate chat_template_from_name(const std::string& name) {
  if (const std::optional<ChatTemplate> t = parse_choice<ChatTemplate>(name)) return *t;
  user_error("unknown chat template \"{}\"; expected one of plain, llama2, llama3, chatml", name);
}

const char* chat_template_name(ChatTemplate t) { return name_of(t); }

// The markers each family's Jinja template writes; Llama 3's first, as its template may mention
// the others' in a comment less often than they mention none.
ChatTemplate recognize_chat_template(const std::string& source, const std::string& file) {
  if (source.empty())
    user_error("{}: holds no chat_template; expected one to recognize (or give the template: plain, llama2, llama3, "
               "chatml)",
               file);
  if (source.find("<|start_header_id|>") != std::string::npos) return ChatTemplate::kLlama3;
  if (source.find("<|im_start|>") != std::string::npos) return ChatTemplate::kChatML;
  if (source.find("[INST]") != std::string::npos) return ChatTemplate::kLlama2;
  user_error("{}: its chat_template is none of the families bcdtrain lays out (Llama 3's <|start_header_id|>, "
             "ChatML's <|im_start|>, Llama 2/Mistral's [INST]); give one of plain, llama2, llama3, chatml",
             file);
}

// The special markers (<|eot_id|>, <|im_start|>, [INST], ...) are text here. A tokenizer.json
// that holds one as an added token encodes it to its single id wherever it occurs (Llama 3's
// <|eot_id|>, Qwen's <|im_end|>); our sentencepiece tokenizers have no user-defined symbols, so
// there a marker is several ordinary tokens, learned like any other text.
std::vector<ChatPiece> render_chat(const ChatRecord& r, ChatTemplate t) {
  const Turns turns = split_turns(r);
  PieceList p;
  switch (t) {
    case ChatTemplate::kPlain: render_plain(turns, &p); break;
    case ChatTemplate::kLlama2: render_llama2(turns, &p); break;
    case ChatTemplate::kLlama3: render_llama3(turns, &p); break;
    case ChatTemplate::kChatML: render_chatml(turns, &p); break;
  }
  return p.take();
}

std::string render_chat_text(const ChatRecord& r, ChatTemplate t) {
  std::string out;
  for (const ChatPiece& p : render_chat(r, t)) {
    switch (p.kind) {
      case ChatPiece::kText: out += p.text; break;
      case ChatPiece::kBos: out += "<s>"; break;
      case ChatPiece::kEos: out += "</s>"; break;
    }
  }
  return out;
}

// ---- Tokens ----

MaskedTokens tokenize_chat(const std::vector<ChatPiece>& pieces, const Tokenizer& tok) {
  MaskedTokens out;
  int last_target = -1;  // the last id trained on so far
  auto append = [&](const std::vector<int>& ids, bool target) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.target.insert(out.target.end(), ids.size(), target ? 1 : 0);
    if (target && !ids.empty()) last_target = ids.back();
  };
  bool at_start = true;  // the next text piece starts a document (record start or after BOS)
  // A BOS waits for the next piece: when that is text whose first token is the BOS itself
  // (SmolLM2's BOS is ChatML's <|im_start|>, which its template writes with no BOS before it),
  // the marker is the record's start and a second copy would be a layout the model never saw.
  int pending_bos = -1;  // -1: none, else the BOS piece's target flag
  auto flush_bos = [&] {
    if (pending_bos >= 0) append({tok.bos_id()}, pending_bos != 0);
    pending_bos = -1;
  };
  for (const ChatPiece& p : pieces) {
    if (p.kind != ChatPiece::kText) flush_bos();
    switch (p.kind) {
      case ChatPiece::kBos:
        if (tok.bos_id() >= 0) pending_bos = p.target ? 1 : 0;
        at_start = true;
        break;
      case ChatPiece::kEos:
        // A turn marker that is itself an end of sequence (Qwen's <|im_end|>, a Llama 3 instruct
        // tokenizer's <|eot_id|>) already ended the record, as in the model's own template.
        if (last_target >= 0 && tok.is_eos(last_target)) break;
        if (tok.eos_id() < 0) {
          user_error("tokenizer {} has no end-of-sequence piece (expected eos_id >= 0; chat "
                     "records end each response with it)",
                     tok.path());
        }
        append({tok.eos_id()}, p.target);
        break;
      case ChatPiece::kText: {
        const std::vector<int> ids = at_start ? tok.encode(p.text) : tok.encode_continuation(p.text);
        if (pending_bos >= 0 && !ids.empty() && ids.front() == tok.bos_id()) pending_bos = -1;
        flush_bos();
        append(ids, p.target);
        at_start = false;
        break;
      }
    }
  }
  flush_bos();
  return out;
}

}  // namespace bcd
