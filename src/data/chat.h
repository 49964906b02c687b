// Instruction data: JSONL records of chat turns, chat templates that lay a record out as text
// with BOS/EOS, and tokenization into ids plus a per-token mask of what the model is trained on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/config.h"
#include "data/tokenizer.h"

namespace bcd {

// ---- Records ----

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;  // as read from the record, never empty for user and assistant
};

// A validated conversation: an optional system message first, then user/assistant turns
// alternating from the user's and ending with the assistant's (so messages.size() >= 2).
struct ChatRecord {
  std::vector<ChatMessage> messages;
};

// The layouts of an instruction record. A JSONL file holds one: its first valid record's.
//   kPrompt         {"prompt": str, "response": str, "system": str (optional)}
//   kMessages       {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}
//   kAlpaca         {"instruction": str, "input": str (optional), "output": str, "system": str
//                   (optional), "history": [[instruction, output], ...] (optional)}: the user's
//                   turn is instruction + "\n" + input (input omitted when empty), history's pairs
//                   are earlier turns (as LLaMA-Factory reads Alpaca)
//   kShareGpt       {"conversations": [{"from": "human"|"user"|"gpt"|"assistant"|"system",
//                   "value": str}, ...], "system": str (optional)}; tool turns (function_call,
//                   observation) are refused by name
//   kConversations  {"conversations": [user, assistant, user, ...]} strings (LIMA), "system"
//                   optional
enum class RecordForm { kPrompt, kMessages, kAlpaca, kShareGpt, kConversations };
const char* record_form_name(RecordForm f);  // "prompt/response", "messages", "Alpaca", ...
std::string record_form_list();              // every form's keys, for messages

// The form a file's records are in, from its first valid record (line 0: none read yet).
struct FileForm {
  RecordForm form = RecordForm::kPrompt;
  int64_t line = 0;
};

// One JSONL line -> record, in any of the forms above. Rules (each break is a UserError
// "FILE:LINE: <what was found>; expected <what>"):
//   - the line is one JSON object (UTF-8, as JSON requires) in exactly one form ("system"
//     belongs to the forms without a system role: with "messages" it is a system message);
//   - with `file_form`, a record of another form than the file's first valid record is refused
//     naming both (and a first valid record sets it); prompt/response and messages, bcdtrain's
//     own two forms, may share a file as they always could;
//   - texts are strings; "system" (and Alpaca's "input") may be null;
//   - roles are known; a system message is first or nowhere; then user and assistant alternate,
//     user first; the last message is the assistant's (there must be something to train on);
//   - user and assistant content holds a non-whitespace character.
// A blank (empty or whitespace-only) system prompt is dropped: the record has none. Keys other
// than the above (ids, sources, metadata) are ignored, in the record and in its messages. The
// same conversation in any form gives the same ChatRecord.
ChatRecord parse_chat_record(std::string_view line, const std::string& file, int64_t line_no,
                             FileForm* file_form = nullptr);

// Reads a whole JSONL file, one record a line (1-based line numbers in errors; blank lines
// skipped). skip_bad: a record parse_chat_record rejects is counted in *n_bad (set to 0 first;
// must not be null) instead of thrown; n_bad may be null when !skip_bad. A file that cannot be
// opened or read is a UserError naming it either way.
std::vector<ChatRecord> read_chat_jsonl(const std::string& path, bool skip_bad, int64_t* n_bad);

// ---- Templates ----

// ChatTemplate and its names are a closed set of the config (base/config.h).
// "plain", "llama2", "llama3", "chatml"; anything else is a UserError listing these.
ChatTemplate chat_template_from_name(const std::string& name);
const char* chat_template_name(ChatTemplate t);
// The family of a Hugging Face chat_template (Jinja `source`, read from `file`): Llama 3 (its
// <|start_header_id|> headers), ChatML (<|im_start|>: Qwen and others), Llama 2 / Mistral
// ([INST]). UserError naming the file and the choices when it is empty or none of them.
ChatTemplate recognize_chat_template(const std::string& source, const std::string& file);

// One stretch of a rendered record. kBos/kEos carry no text: they become the tokenizer's ids.
// target: the model is trained to produce this piece (assistant content and end-of-turn marker).
struct ChatPiece {
  enum Kind { kText, kBos, kEos } kind;
  std::string text;
  bool target;
};

// The record as template `t` lays it out. `target` marks each assistant turn's content plus the
// template's end-of-turn marker (so the model learns to stop). Every record ends with an EOS
// piece, a target (the last message is always the assistant's). Adjacent text pieces with the
// same target flag are merged. Layouts (S = system, U = user, A = assistant, <s>/</s> = BOS/EOS
// pieces, [..] = target):
//   plain   <s>### System:\nS\n\n### Instruction:\nU\n\n### Response:\n[A</s>]
//           turns after the first start with "\n\n### Instruction:\n"
//   llama2  <s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST][ A </s>]  then <s>[INST] U [/INST][ A </s>]
//   llama3  <s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>
//           <|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>
//           <|start_header_id|>assistant<|end_header_id|>\n\n[A<|eot_id|>] ... [</s>]
//   chatml  <s><|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n
//           <|im_start|>assistant\n[A<|im_end|>]\n ... [</s>]
std::vector<ChatPiece> render_chat(const ChatRecord& r, ChatTemplate t);

// The pieces joined, BOS/EOS written "<s>"/"</s>": for tests, tokenizer training and display.
std::string render_chat_text(const ChatRecord& r, ChatTemplate t);

// ---- Tokens ----

struct MaskedTokens {
  std::vector<int> ids;
  std::vector<uint8_t> target;  // target[i] = 1: ids[i] is trained on (predicted from ids[< i])
};

// Tokenizes `pieces` piece by piece, so no token straddles a prompt/response boundary; each
// token takes its piece's target flag. A kBos piece is skipped when tok.bos_id() < 0, or when the
// text after it encodes to a first token that is the BOS itself (SmolLM2's <|im_start|>). A kEos
// piece is skipped when the last target token is already one of the tokenizer's EOS ids (a
// ChatML <|im_end|> that ends Qwen's sequences), else needs tok.eos_id() >= 0 (UserError naming
// the tokenizer otherwise). A text piece that starts the record or follows a kBos piece is
// encoded as a document is (sentencepiece's dummy prefix "▁" included, as in `prepare` and
// Meta's Llama 2 per-turn encoding); any other text piece is encoded as the continuation of
// the text before it (Tokenizer::encode_continuation), so the ids decode to the rendered text.
// Markers a tokenizer.json holds as added tokens become their single ids.
MaskedTokens tokenize_chat(const std::vector<ChatPiece>& pieces, const Tokenizer& tok);

}  // namespace bcd
