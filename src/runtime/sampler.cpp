// Sampling: filter the distribution (top-k, then top-p), draw with a seeded generator; the text
// streamed in whole characters as the tokens come.
#include "runtime/sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <string_view>

#include "base/error.h"
#include "base/printable.h"
#include "base/stop.h"
#include "data/dataset.h"

namespace bcd {

int64_t sample_token(const torch::Tensor& logits_in, const SampleOptions& opt, at::Generator& gen) {
  torch::Tensor logits = logits_in.detach().to(torch::kCPU, torch::kFloat32).reshape({-1});
  if (opt.temperature <= 0) return logits.argmax().item<int64_t>();
  // In double, from the maximum down: a tiny temperature sends the others to -inf (greedy in
  // the limit) instead of overflowing to inf - inf = nan.
  logits = logits.to(torch::kFloat64);
  logits = (logits - logits.max()) / opt.temperature;
  const int64_t v = logits.numel();
  auto sorted = logits.sort(/*dim=*/-1, /*descending=*/true);
  torch::Tensor vals = std::get<0>(sorted), idx = std::get<1>(sorted);
  int64_t keep = v;
  if (opt.top_k > 0) keep = std::min(keep, opt.top_k);
  torch::Tensor probs = torch::softmax(vals.narrow(0, 0, keep), 0);
  if (opt.top_p < 1.0) {
    // smallest prefix whose mass reaches top_p (at least one token)
    torch::Tensor cum = probs.cumsum(0);
    int64_t n = (cum < opt.top_p).sum().item<int64_t>() + 1;
    keep = std::min(keep, n);
    probs = probs.narrow(0, 0, keep);
  }
  int64_t j = torch::multinomial(probs / probs.sum(), 1, /*replacement=*/false, gen).item<int64_t>();
  return idx[j].item<int64_t>();
}

std::vector<int> generate_tokens(const LlamaModel& model, const std::vector<int>& prompt,
                                 const SampleOptions& opt, uint64_t seed, const TokenSink& on_token) {
  torch::NoGradGuard ng;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<int64_t> ctx(prompt.begin(), prompt.end());
  if (ctx.empty()) user_error("generate: empty prompt (the tokenizer produced no tokens)");
  std::vector<int> out;
  const int64_t max_t = model.config().max_seq_len;
  for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
    check_stop();
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ctx.size()) - max_t);
    torch::Tensor x = torch::tensor(std::vector<int64_t>(ctx.begin() + start, ctx.end()), torch::kInt64)
                          .view({1, -1});
    torch::Tensor logits = model.forward(x).select(1, x.size(1) - 1).select(0, 0);
    int64_t tok = sample_token(logits, opt, gen);
    out.push_back(static_cast<int>(tok));
    ctx.push_back(tok);
    if (on_token && !on_token(static_cast<int>(tok))) break;
    if (std::find(opt.stop_tokens.begin(), opt.stop_tokens.end(), tok) != opt.stop_tokens.end()) break;
  }
  return out;
}

// ---- Text as it comes ----

std::string TextStream::add(const std::vector<int>& ids) {
  if (ids.empty()) return {};
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  std::string before = std::move(text_);
  text_ = tok_.decode(ids_);
  // Decoding more ids only extends the text but for a character still being spelt out in byte
  // tokens; if a decode ever rewrote what was handed out, the rest waits for finish().
  if (diverged_ || text_.compare(0, shown_, before, 0, shown_) != 0) {
    diverged_ = true;
    return {};
  }
  // U+FFFD: sentencepiece's stand-in for bytes that are no character (yet): the next byte token
  // may complete them.
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t end = text_.size();
  while (end >= shown_ + kReplacement.size() &&
         std::string_view(text_).substr(end - kReplacement.size(), kReplacement.size()) == kReplacement)
    end -= kReplacement.size();
  end = shown_ + utf8_complete_prefix(std::string_view(text_).substr(shown_, end - shown_));
  std::string piece = text_.substr(shown_, end - shown_);
  shown_ = end;
  return piece;
}

std::string TextStream::finish() {
  std::string rest = shown_ < text_.size() ? text_.substr(shown_) : std::string();
  shown_ = text_.size();
  return rest;
}

std::string generate_text(const LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                          SampleOptions opt, uint64_t seed, const TextSink& sink) {
  std::vector<int> ids = tok.encode(prompt);
  const int start = tok.eos_id() >= 0 ? tok.eos_id() : tok.bos_id();
  std::vector<int> ctx;
  if (start >= 0) ctx.push_back(start);
  ctx.insert(ctx.end(), ids.begin(), ids.end());
  opt.stop_tokens = tok.eos_ids();
  // The prompt's text first, then each token's (the EOS that ends the text has none).
  TextStream stream(tok);
  TokenSink on_token;
  if (sink) {
    sink(stream.add(ids));
    on_token = [&](int id) {
      if (!tok.is_eos(id)) sink(stream.add({id}));
      return true;
    };
  }
  std::vector<int> out = generate_tokens(model, ctx, opt, seed, on_token);
  if (!out.empty() && tok.is_eos(out.back())) out.pop_back();
  ids.insert(ids.end(), out.begin(), out.end());
  if (sink) sink(stream.finish());
  return tok.decode(ids);
}

namespace {

// Bytes at the end of `text` that could be the start of `marker` (a proper prefix of it): held
// back until the next token shows whether the marker is being written.
size_t marker_start_at_end(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

std::string generate_chat(const LlamaModel& model, const Tokenizer& tok, ChatTemplate tmpl, const std::string& prompt,
                          SampleOptions opt, uint64_t seed, const TextSink& sink) {
  // Laid out with a placeholder answer: the pieces before the first target are the prompt, and
  // what follows the placeholder in that target piece is the end-of-turn marker.
  constexpr std::string_view kHole = "\x01";
  const std::vector<ChatPiece> pieces = render_chat(ChatRecord{{{"user", prompt}, {"assistant", std::string(kHole)}}}, tmpl);
  std::vector<ChatPiece> head;
  std::string marker, shown;
  for (const ChatPiece& p : pieces) {
    if (p.target) {
      const size_t at = p.text.find(kHole);
      marker = at == std::string::npos ? "" : p.text.substr(at + kHole.size());
      if (at != std::string::npos && at > 0) head.push_back({ChatPiece::kText, p.text.substr(0, at), false});
      break;
    }
    head.push_back(p);
  }
  for (const ChatPiece& p : head) shown += p.text;
  opt.stop_tokens = tok.eos_ids();
  // A whitespace marker (Llama 2's " ") is not a place to cut; the others end the turn, and the
  // generation with them: nothing after the marker is kept.
  const bool cuts = marker.find_first_not_of(" \n") != std::string::npos;
  // The answer so far: the stream's whole characters; handed to the sink up to the marker, less
  // a tail that may be the marker's start.
  TextStream stream(tok);
  std::string so_far;
  size_t handed = 0;
  if (sink) sink(shown);
  const TokenSink on_token = [&](int id) {
    if (tok.is_eos(id)) return true;
    so_far += stream.add({id});
    size_t upto = so_far.size();
    bool ended = false;
    if (cuts) {
      const size_t at = so_far.find(marker);
      ended = at != std::string::npos;
      upto = ended ? at : upto - marker_start_at_end(so_far, marker);
    }
    if (sink && upto > handed) sink(std::string_view(so_far).substr(handed, upto - handed)), handed = upto;
    return !ended;
  };
  std::vector<int> out = generate_tokens(model, tokenize_chat(head, tok).ids, opt, seed, on_token);
  if (!out.empty() && tok.is_eos(out.back())) out.pop_back();
  std::string answer = tok.decode(out);
  if (cuts) {
    const size_t end = answer.find(marker);
    if (end != std::string::npos) answer.resize(end);
  }
  // What was handed out is a prefix of the answer: a marker starting before `handed` would have
  // been seen whole, or held back as its start.
  if (sink && answer.size() > handed) sink(std::string_view(answer).substr(handed));
  return shown + answer;
}

std::optional<ChatTemplate> sample_chat_template(SampleChat setting, const std::string& data_dir) {
  if (setting != SampleChat::kAuto) return named_template(setting);  // none: no template
  const std::string name = dataset_chat_template(data_dir);
  if (name.empty()) return std::nullopt;
  return chat_template_from_name(name);
}

}  // namespace bcd
