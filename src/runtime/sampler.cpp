// Sampling: filter the distribution (top-k, then top-p), draw with a seeded generator.
#include "runtime/sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <string_view>

#include "base/error.h"
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
                                 const SampleOptions& opt, uint64_t seed) {
  torch::NoGradGuard ng;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<int64_t> ctx(prompt.begin(), prompt.end());
  if (ctx.empty()) user_error("generate: empty prompt (the tokenizer produced no tokens)");
  std::vector<int> out;
  const int64_t max_t = model.config().max_seq_len;
  for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ctx.size()) - max_t);
    torch::Tensor x = torch::tensor(std::vector<int64_t>(ctx.begin() + start, ctx.end()), torch::kInt64)
                          .view({1, -1});
    torch::Tensor logits = model.forward(x).select(1, x.size(1) - 1).select(0, 0);
    int64_t tok = sample_token(logits, opt, gen);
    out.push_back(static_cast<int>(tok));
    ctx.push_back(tok);
    if (tok == opt.stop_token) break;
  }
  return out;
}

std::string generate_text(const LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                          SampleOptions opt, uint64_t seed) {
  std::vector<int> ids = tok.encode(prompt);
  const int start = tok.eos_id() >= 0 ? tok.eos_id() : tok.bos_id();
  std::vector<int> ctx;
  if (start >= 0) ctx.push_back(start);
  ctx.insert(ctx.end(), ids.begin(), ids.end());
  opt.stop_token = tok.eos_id();
  std::vector<int> out = generate_tokens(model, ctx, opt, seed);
  if (!out.empty() && out.back() == tok.eos_id()) out.pop_back();
  ids.insert(ids.end(), out.begin(), out.end());
  return tok.decode(ids);
}

std::string generate_chat(const LlamaModel& model, const Tokenizer& tok, ChatTemplate tmpl, const std::string& prompt,
                          SampleOptions opt, uint64_t seed) {
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
  opt.stop_token = tok.eos_id();
  std::vector<int> out = generate_tokens(model, tokenize_chat(head, tok).ids, opt, seed);
  if (!out.empty() && out.back() == tok.eos_id()) out.pop_back();
  std::string answer = tok.decode(out);
  // A whitespace marker (Llama 2's " ") is not a place to cut; the others end the turn.
  if (marker.find_first_not_of(" \n") != std::string::npos) {
    const size_t end = answer.find(marker);
    if (end != std::string::npos) answer.resize(end);
  }
  return shown + answer;
}

std::optional<ChatTemplate> sample_chat_template(SampleChat setting, const std::string& data_dir) {
  if (setting != SampleChat::kAuto) return named_template(setting);  // none: no template
  const std::string name = dataset_chat_template(data_dir);
  if (name.empty()) return std::nullopt;
  return chat_template_from_name(name);
}

}  // namespace bcd
