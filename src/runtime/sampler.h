// Text generation from a model: temperature, top-k and nucleus (top-p) sampling.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
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
  int stop_token = -1;       // stop after emitting this id (EOS); -1 = never
};

// logits (V) -> the token id drawn; a pure function of (logits, options, generator state).
int64_t sample_token(const torch::Tensor& logits, const SampleOptions& opt, at::Generator& gen);

// Continues `prompt` (token ids) and returns only the new ids. The context is cropped to the
// model's max_seq_len; each new token re-runs the model on the context (no KV cache yet).
std::vector<int> generate_tokens(const LlamaModel& model, const std::vector<int>& prompt,
                                 const SampleOptions& opt, uint64_t seed);

// Text in, text out: the prompt follows an end-of-document token (how documents start in
// the training stream); generation stops at the next one. Returns prompt + continuation.
std::string generate_text(const LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                          SampleOptions opt, uint64_t seed);

// Chat: `prompt` is a user turn laid out by `tmpl` (as the fine-tuning data was); generation
// stops at EOS. Returns the prompt as laid out (BOS left out) followed by the answer, the
// template's end-of-turn marker and anything after it removed.
std::string generate_chat(const LlamaModel& model, const Tokenizer& tok, ChatTemplate tmpl, const std::string& prompt,
                          SampleOptions opt, uint64_t seed);

// The template [sample] prompts are laid out in: `setting` auto = the template of the dataset in
// `data_dir` when it holds instruction data (none when it is plain text or cannot be read),
// none = none, else the template it names.
std::optional<ChatTemplate> sample_chat_template(SampleChat setting, const std::string& data_dir);

}  // namespace bcd
