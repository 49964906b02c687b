// Text generation from a model: temperature, top-k and nucleus (top-p) sampling; the text handed
// out as it is generated, in whole UTF-8 characters.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat.h"
#include "data/tokenizer.h"
#include "model/llama.h"

namespace bcd {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.8;  // 0 = greedy
  int64_t top_k = 40;        // 0 = off
  double top_p = 0.95;       // 1 = off
  std::vector<int> stop_tokens;  // stop after emitting one of these ids (the EOS ids); none = never
};

// logits (V) -> the token id drawn; a pure function of (logits, options, generator state).
int64_t sample_token(const torch::Tensor& logits, const SampleOptions& opt, at::Generator& gen);

// Called with each id as it is drawn; returning false stops the generation after it.
using TokenSink = std::function<bool(int id)>;

// Continues `prompt` (token ids) and returns only the new ids. The context is cropped to the
// model's max_seq_len; each new token re-runs the model on the context (no KV cache yet).
std::vector<int> generate_tokens(const LlamaModel& model, const std::vector<int>& prompt,
                                 const SampleOptions& opt, uint64_t seed, const TokenSink& on_token = {});

// The text of a growing list of token ids, handed out as the ids come: only what later ids cannot
// change. A character whose bytes come in several byte-fallback tokens is held until it is whole
// (sentencepiece decodes the bytes so far as U+FFFD), so every piece is whole UTF-8 characters.
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tok) : tok_(tok) {}
  // The text that `ids`, added to those before, make final ("" while a character is split).
  std::string add(const std::vector<int>& ids);
  // At the end: what was held back (the bytes of a character that never became whole).
  std::string finish();
  // decode() of every id so far: what the pieces add up to once finished.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer& tok_;
  std::vector<int> ids_;
  std::string text_;       // decode(ids_)
  size_t shown_ = 0;       // bytes of text_ handed out
  bool diverged_ = false;  // a decode that does not extend what was handed out: the rest at finish()
};

// Receives generated text in pieces of whole UTF-8 characters, as it is generated; the pieces,
// in order, add up to what generate_text and generate_chat return. Nothing is escaped: that is
// for whoever shows them (base/printable.h).
using TextSink = std::function<void(std::string_view piece)>;

// Text in, text out: the prompt follows an end-of-document token (how documents start in
// the training stream); generation stops at the next one. Returns prompt + continuation.
std::string generate_text(const LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                          SampleOptions opt, uint64_t seed, const TextSink& sink = {});

// Chat: `prompt` is a user turn laid out by `tmpl` (as the fine-tuning data was); generation
// stops at EOS, or once the template's end-of-turn marker is written. Returns the prompt as laid
// out (BOS left out) followed by the answer, the marker and anything after it removed.
std::string generate_chat(const LlamaModel& model, const Tokenizer& tok, ChatTemplate tmpl, const std::string& prompt,
                          SampleOptions opt, uint64_t seed, const TextSink& sink = {});

// The template [sample] prompts are laid out in: `setting` auto = the template of the dataset in
// `data_dir` when it holds instruction data (none when it is plain text or cannot be read),
// none = none, else the template it names.
std::optional<ChatTemplate> sample_chat_template(SampleChat setting, const std::string& data_dir);

}  // namespace bcd
