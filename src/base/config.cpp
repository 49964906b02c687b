// Config loading: TOML tables onto the typed structs of config.h, overrides, validation, dumps.
#include "base/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "base/bytes.h"
#include "base/error.h"

namespace bcd {
namespace {

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

// ---- Reading one table into a struct ----
struct FieldReader {
  const toml::table& tbl;
  std::string section;
  std::string source;
  std::set<std::string> known;

  [[noreturn]] void bad(const std::string& key, const toml::node& n, const char* expected) {
    user_error("{}: [{}] {}: expected {}, found {}", source, section, key, expected, type_name(n));
  }
  void operator()(const char* key, int64_t& f, const char*, Resume) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto v = n->as_integer()) f = v->get();
    else bad(key, *n, "an integer");
  }
  void operator()(const char* key, double& f, const char*, Resume) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto v = n->as_floating_point()) f = v->get();
    else if (auto i = n->as_integer()) f = static_cast<double>(i->get());
    else bad(key, *n, "a number");
    // TOML has nan and inf; no key takes them (and range checks like `x < 0` let NaN through).
    if (!std::isfinite(f)) user_error("{}: [{}] {}: expected a finite number, got {}", source, section, key, f);
  }
  void operator()(const char* key, bool& f, const char*, Resume) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto v = n->as_boolean()) f = v->get();
    else bad(key, *n, "a boolean (true or false)");
  }
  void operator()(const char* key, std::string& f, const char*, Resume) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto v = n->as_string()) f = v->get();
    else bad(key, *n, "a string");
  }
  void operator()(const char* key, Bytes& f, const char*, Resume) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto i = n->as_integer()) {
      if (i->get() < 0)
        user_error("{}: [{}] {}: expected a size like \"24GiB\" or \"auto\", got {}", source, section, key, i->get());
      f = Bytes{static_cast<uint64_t>(i->get()), false};
    } else if (auto s = n->as_string()) {
      const std::string text = s->get();
      if (text == "auto") {
        f = Bytes{0, true};
        return;
      }
      try {
        f = Bytes{parse_bytes(text), false};
      } catch (const UserError&) {
        user_error("{}: [{}] {}: expected a size like \"24GiB\" or \"auto\", got \"{}\"", source, section, key, text);
      }
    } else {
      bad(key, *n, "a size like \"24GiB\", an integer byte count or \"auto\"");
    }
  }
  void operator()(const char* key, std::vector<std::string>& f, const char*, Resume) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    const toml::array* arr = n->as_array();
    if (!arr) bad(key, *n, "an array of strings");
    std::vector<std::string> out;
    for (const toml::node& e : *arr) {
      if (auto s = e.as_string()) out.push_back(s->get());
      else bad(key, e, "an array of strings");
    }
    f = std::move(out);
  }
  template <class E, std::enable_if_t<is_choice<E>::value, int> = 0>
  void operator()(const char* key, E& f, const char*, Resume) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    const auto* name = n->as_string();
    if (!name) bad(key, *n, ("one of " + choice_list<E>()).c_str());
    const std::optional<E> e = parse_choice<E>(name->get());
    if (!e) user_error("{}: [{}] {}: expected {}, got \"{}\"", source, section, key, choice_list<E>(), name->get());
    f = *e;
  }
  void operator()(const char* key, std::vector<double>& f, const char*, Resume) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    const toml::array* arr = n->as_array();
    if (!arr) bad(key, *n, "an array of numbers");
    std::vector<double> out;
    for (const toml::node& e : *arr) {
      if (auto v = e.as_floating_point()) out.push_back(v->get());
      else if (auto i = e.as_integer()) out.push_back(static_cast<double>(i->get()));
      else bad(key, e, "an array of numbers");
      if (!std::isfinite(out.back()))
        user_error("{}: [{}] {}: expected finite numbers, got {}", source, section, key, out.back());
    }
    f = std::move(out);
  }
};

template <class Section>
void read_section(Section& s, const toml::table& tbl, const std::string& name,
                  const std::string& source) {
  FieldReader r{tbl, name, source, {}};
  s.visit(r);
  for (const auto& [k, v] : tbl) {
    std::string key(k.str());
    if (!r.known.count(key)) {
      std::string valid;
      for (const auto& kk : r.known) valid += (valid.empty() ? "" : ", ") + kk;
      user_error("{}: unknown key [{}] {} (valid keys: {})", source, name, key, valid);
    }
  }
}

void apply_table(Config& cfg, const toml::table& root, const std::string& source) {
  std::set<std::string> sections;
  auto visit = [&](const char* name, auto& section) {
    sections.insert(name);
    const toml::node* n = root.get(name);
    if (!n) return;
    const toml::table* t = n->as_table();
    if (!t) user_error("{}: [{}] must be a table, found {}", source, name, type_name(*n));
    read_section(section, *t, name, source);
  };
  cfg.visit_sections(visit);
  for (const auto& [k, v] : root) {
    if (!sections.count(std::string(k.str()))) {
      std::string valid;
      for (const auto& s : sections) valid += (valid.empty() ? "" : ", ") + s;
      user_error("{}: unknown section or key '{}' (valid sections: {})", source, k.str(), valid);
    }
  }
}

toml::table parse_text(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    user_error("{}:{}:{}: TOML syntax error: {}", source, b.line, b.column, e.description());
  }
}

// ---- Writing ----
struct FieldWriter {
  toml::table& out;
  void operator()(const char* key, int64_t& f, const char*, Resume) { out.insert_or_assign(key, f); }
  void operator()(const char* key, double& f, const char*, Resume) { out.insert_or_assign(key, f); }
  void operator()(const char* key, bool& f, const char*, Resume) { out.insert_or_assign(key, f); }
  void operator()(const char* key, std::string& f, const char*, Resume) { out.insert_or_assign(key, f); }
  // Lossless and readable: "auto", "24GiB", "512MiB", or the integer byte count.
  void operator()(const char* key, Bytes& f, const char*, Resume) {
    if (f.is_auto) return void(out.insert_or_assign(key, "auto"));
    const uint64_t v = f.value;
    const std::pair<uint64_t, const char*> units[] = {{1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
    for (const auto& [u, name] : units)
      if (v >= u && v % u == 0) return void(out.insert_or_assign(key, std::to_string(v / u) + name));
    out.insert_or_assign(key, static_cast<int64_t>(v));
  }
  void operator()(const char* key, std::vector<std::string>& f, const char*, Resume) {
    toml::array a;
    for (const auto& s : f) a.push_back(s);
    out.insert_or_assign(key, std::move(a));
  }
  template <class E, std::enable_if_t<is_choice<E>::value, int> = 0>
  void operator()(const char* key, E& f, const char*, Resume) {
    out.insert_or_assign(key, std::string(name_of(f)));
  }
  void operator()(const char* key, std::vector<double>& f, const char*, Resume) {
    toml::array a;
    for (double d : f) a.push_back(d);
    out.insert_or_assign(key, std::move(a));
  }
};

// One key's value as config.toml writes it ("0.002", "'runs/a'", "[ 1, 2 ]").
template <class T>
std::string value_text(const char* key, T& f, const char* doc, Resume r) {
  toml::table t;
  FieldWriter w{t};
  w(key, f, doc, r);
  std::ostringstream v;
  v << t;  // "key = value"
  std::string kv = v.str();
  const auto eq = kv.find(" = ");
  std::string value = eq == std::string::npos ? kv : kv.substr(eq + 3);
  while (!value.empty() && value.back() == '\n') value.pop_back();
  return value;
}

struct DocWriter {
  std::ostringstream& os;
  template <class T>
  void operator()(const char* key, T& f, const char* doc, Resume r) {
    os << "| `" << key << "` | `" << value_text(key, f, doc, r) << "` | " << doc << " |\n";
  }
};

struct ValueLister {
  std::string section;
  std::vector<std::pair<std::string, std::string>> out;
  template <class T>
  void operator()(const char* key, T& f, const char* doc, Resume r) {
    out.emplace_back(section + "." + key, value_text(key, f, doc, r));
  }
};

}  // namespace

void apply_config_text(Config& cfg, const std::string& text, const std::string& source) {
  apply_table(cfg, parse_text(text, source), source);
}

Config load_config(const std::string& file, const std::vector<std::string>& overrides) {
  std::string text;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) user_error("{}: cannot open config file", file);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  return load_config_text(text, file, overrides);
}

Config load_config_text(const std::string& text, const std::string& source, const std::vector<std::string>& overrides) {
  Config cfg;
  if (!text.empty()) apply_config_text(cfg, text, source);
  for (std::string o : overrides) {
    const std::string flag = o;
    if (o.rfind("--", 0) == 0) o = o.substr(2);
    auto eq = o.find('=');
    auto dot = o.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      user_error("override '{}': expected --section.key=value", flag);
    std::string section = o.substr(0, dot);
    std::string key = o.substr(dot + 1, eq - dot - 1);
    std::string value = o.substr(eq + 1);
    // A value that does not parse as TOML (a bare path, a word) is taken as a string.
    toml::table t;
    try {
      t = toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      t = toml::table{};
      t.insert("v", value);
    }
    toml::table sec;
    sec.insert(key, *t.get("v"));
    toml::table root;
    root.insert(section, std::move(sec));
    apply_table(cfg, root, flag);
  }
  validate_config(cfg);
  return cfg;
}

namespace {
void positive(const char* section, const char* key, int64_t v) {
  if (v <= 0) user_error("config: [{}] {} must be positive, got {}", section, key, v);
}
}  // namespace

void ModelConfig::validate() const {
  if (!init_from.empty()) {
    const bool hf = init_from.rfind("hf:", 0) == 0;
    const bool h5 = init_from.size() > 3 && init_from.compare(init_from.size() - 3, 3, ".h5") == 0;
    if ((hf && init_from.size() == 3) || (!hf && !h5))
      user_error("config: [model] init_from: expected \"hf:DIR\" or a path ending in .h5, got \"{}\"", init_from);
  }
  if (init_std < 0) user_error("config: [model] init_std must be >= 0, got {}", init_std);
  if (loss_chunk_tokens < 0)
    user_error("config: [model] loss_chunk_tokens must be >= 0 (0 = auto), got {}", loss_chunk_tokens);
  // With hf_config or init_from the shape comes from a file, checked when it is read.
  if (!hf_config.empty() || !init_from.empty()) return;
  positive("model", "d_model", d_model);
  positive("model", "n_layers", n_layers);
  positive("model", "n_heads", n_heads);
  if (vocab_size < 0) user_error("config: [model] vocab_size must be >= 0, got {}", vocab_size);
  if (n_kv_heads < 0) user_error("config: [model] n_kv_heads must be >= 0, got {}", n_kv_heads);
  if (d_ff < 0) user_error("config: [model] d_ff must be >= 0 (0 = 8/3 d_model), got {}", d_ff);
  if (d_head < 0 || d_head > (int64_t{1} << 16))
    user_error("config: [model] d_head must be in [0, 65536] (0 = d_model / n_heads), got {}", d_head);
  if (d_head == 0 && d_model % n_heads != 0)
    user_error("config: [model] d_model ({}) must be divisible by n_heads ({}), or d_head set", d_model, n_heads);
  if (n_heads % kv_heads() != 0)
    user_error("config: [model] n_heads ({}) must be divisible by n_kv_heads ({})", n_heads, kv_heads());
  if (n_heads > (int64_t{1} << 24) / std::max<int64_t>(head_dim(), 1))
    user_error("config: [model] n_heads ({}) x the head dimension ({}: {}) is beyond any model (at most {})", n_heads,
               d_head > 0 ? "d_head" : "d_model / n_heads", head_dim(), int64_t{1} << 24);
  if (head_dim() % 2 != 0)
    user_error("config: [model] head dimension {} ({}) must be even for rotary embeddings", head_dim(),
               d_head > 0 ? "d_head" : "d_model / n_heads");
  positive("model", "max_seq_len", max_seq_len);
  if (!rope_theta_ok(rope_theta))
    user_error("config: [model] rope_theta must be a number above 1 that fp32 holds (the rotary frequencies are "
               "computed in fp32, as transformers computes them), got {}", rope_theta);
  if (norm_eps <= 0) user_error("config: [model] norm_eps must be positive");
  if (rope_type != RopeType::kDefault && (!(rope_factor > 0) || !std::isfinite(rope_factor)))
    user_error("config: [model] rope_factor must be positive for rope_type \"{}\", got {}", name_of(rope_type), rope_factor);
  if (rope_type == RopeType::kLlama3 && !(rope_low_freq_factor > 0 && rope_high_freq_factor > rope_low_freq_factor))
    user_error("config: [model] rope_type \"llama3\" needs 0 < rope_low_freq_factor < rope_high_freq_factor, got {} and {}",
               rope_low_freq_factor, rope_high_freq_factor);
  if (rope_original_max_len < 0)
    user_error("config: [model] rope_original_max_len must be >= 0 (0 = max_seq_len), got {}", rope_original_max_len);
  if (rope_type == RopeType::kYarn && !(rope_beta_fast > 0 && rope_beta_slow > 0 && rope_attention_factor >= 0))
    user_error("config: [model] rope_type \"yarn\" needs positive rope_beta_fast and rope_beta_slow and "
               "rope_attention_factor >= 0, got {}, {} and {}", rope_beta_fast, rope_beta_slow, rope_attention_factor);
}

void TrainConfig::validate() const {
  positive("train", "steps", steps);
  if (checkpoint_every < 0) user_error("config: [train] checkpoint_every must be >= 0");
  if (keep_checkpoints < 0) user_error("config: [train] keep_checkpoints must be >= 0");
  positive("train", "batch_size", batch_size);
  positive("train", "seq_len", seq_len);
  positive("train", "grad_accum", grad_accum);
  positive("train", "log_every", log_every);
  positive("train", "val_batches", val_batches);
  // A step's tokens on one rank, bounded: a mistyped grad_accum (1e12) would make one step run for
  // days, logging nothing and deaf to SIGTERM until it ends.
  const double step_tokens = static_cast<double>(batch_size) * static_cast<double>(seq_len) * static_cast<double>(grad_accum);
  if (step_tokens > static_cast<double>(kMaxStepTokens))
    user_error("config: [train] batch_size x seq_len x grad_accum = {} x {} x {} = {:.0f} tokens per rank per step; "
               "expected at most {} (2^31)",
               batch_size, seq_len, grad_accum, step_tokens, kMaxStepTokens);
  if (lr <= 0) user_error("config: [train] lr must be positive, got {}", lr);
  if (warmup_steps < 0) user_error("config: [train] warmup_steps must be >= 0");
  if (min_lr_ratio < 0 || min_lr_ratio > 1)
    user_error("config: [train] min_lr_ratio must be in [0, 1], got {}", min_lr_ratio);
  if (grad_clip < 0) user_error("config: [train] grad_clip must be >= 0");
  if (peak_tflops < 0) user_error("config: [train] peak_tflops must be >= 0 (0 = from the GPU's name)");
  if (val_every < 0) user_error("config: [train] val_every must be >= 0");
  if (threads < 0) user_error("config: [train] threads must be >= 0");
  if (run_dir.empty()) user_error("config: [train] run_dir must not be empty");
}

void OptimConfig::validate() const {
  // The AdamW kernels take the betas in fp32: 0.99999999 would round to 1 there.
  if (beta1 < 0 || static_cast<float>(beta1) >= 1)
    user_error("config: [optim] beta1 must be in [0, 1) in single precision, got {}", beta1);
  if (beta2 < 0 || static_cast<float>(beta2) >= 1)
    user_error("config: [optim] beta2 must be in [0, 1) in single precision, got {}", beta2);
  if (eps <= 0) user_error("config: [optim] eps must be positive");
  if (weight_decay < 0) user_error("config: [optim] weight_decay must be >= 0");
}

void BcdConfig::validate() const {
  positive("bcd", "switch_every", switch_every);
  positive("bcd", "layers_per_block", layers_per_block);
  positive("bcd", "vocab_slices", vocab_slices);
  if (vocab_slices > kMaxVocabSlices)
    user_error("config: [bcd] vocab_slices: expected 1 up to {}, got {}", kMaxVocabSlices, vocab_slices);
  // Slices are units of BCD's schedule: without it (or with one unit for the whole model) they
  // would be ignored without a word.
  if (vocab_slices > 1 && (!enabled || blocks == BlockKind::kWhole))
    user_error("config: [bcd] vocab_slices = {} slices the embedding's and the head's units, but {}: set "
               "vocab_slices = 1",
               vocab_slices, !enabled ? "block coordinate descent is off (enabled = false)"
                                      : "blocks = \"whole\" trains the model as one unit");
  if (vocab_slices > 1 && !include_embed && !include_head)
    user_error("config: [bcd] vocab_slices = {} slices the embedding's and the head's units, but neither is trained "
               "(include_embed = include_head = false): set vocab_slices = 1",
               vocab_slices);
  if (order == BlockOrder::kFixed && fixed_order.empty())
    user_error("config: [bcd] fixed_order must list block names when order = \"fixed\"");
  if (blocks == BlockKind::kAttnMlp && layers_per_block != 1)
    user_error("config: [bcd] layers_per_block must be 1 with blocks = \"attn_mlp\"");
  if (visit_warmup < 0 || (enabled && visit_warmup >= switch_every))
    user_error("config: [bcd] visit_warmup: expected 0 up to switch_every - 1 ({}), got {}", switch_every - 1, visit_warmup);
}

void DataConfig::validate() const {
  if (!paths.empty() && !path.empty())
    user_error("config: [data] has both path and paths; give path for one dataset, paths for a mixture");
  if (paths.empty() && !weights.empty())
    user_error("config: [data] weights are given without paths (they weigh paths' datasets)");
  if (!weights.empty() && weights.size() != paths.size())
    user_error("config: [data] weights holds {} numbers for {} paths, expected one weight per path (or none: equal)",
               weights.size(), paths.size());
  for (double w : weights)
    if (!(w > 0) || w > 1e12)
      user_error("config: [data] weights: {} is not a weight, expected positive numbers (relative shares, at most 1e12)", w);
}

void SampleConfig::validate() const {
  if (max_new_tokens < 0 || max_new_tokens > kMaxNewTokens)
    user_error("config: [sample] max_new_tokens: expected 0 up to {}, got {}", kMaxNewTokens, max_new_tokens);
  if (temperature < 0) user_error("config: [sample] temperature must be >= 0");
  if (top_k < 0) user_error("config: [sample] top_k must be >= 0");
  if (top_p <= 0 || top_p > 1) user_error("config: [sample] top_p must be in (0, 1]");
}

void MemoryConfig::validate() const {
  positive("memory", "prefetch_depth", prefetch_depth);
  for (const auto& p : nvme_paths)
    if (p.empty()) user_error("config: [memory] nvme_paths: an entry is empty");
  if (stream_depth < 2 || stream_depth > 16)
    user_error("config: [memory] stream_depth: expected 2 to 16 window buffers, got {}", stream_depth);
  if (!(stream_gbps >= 0) || stream_gbps > 1e6)
    user_error("config: [memory] stream_gbps: expected GB/s >= 0 (0: by device), got {}", stream_gbps);
  if (!(stream_nvme_gbps >= 0) || stream_nvme_gbps > 1e6)
    user_error("config: [memory] stream_nvme_gbps: expected GB/s >= 0 (0: by device), got {}", stream_nvme_gbps);
  if (!(stream_tflops >= 0) || stream_tflops > 1e6)
    user_error("config: [memory] stream_tflops: expected TFLOP/s >= 0 (0: by device), got {}", stream_tflops);
}

void DistConfig::validate() const {
  positive("dist", "timeout_s", timeout_s);
  if (bucket_bytes.is_auto || bucket_bytes.value < 4096)
    user_error("config: [dist] bucket_bytes must be a size of at least 4KiB");
  if (nproc < 1 || nproc > 1024) user_error("config: [dist] nproc: expected 1 to 1024 ranks per machine, got {}", nproc);
}

// named_template maps SampleChat's templates onto ChatTemplate by position.
static_assert(static_cast<int>(SampleChat::kChatML) - static_cast<int>(SampleChat::kPlain) ==
                  static_cast<int>(ChatTemplate::kChatML),
              "SampleChat's templates must follow ChatTemplate's order");

void validate_config(const Config& c) {
  Config sections = c;  // visit_sections visits for writing too; validate() only reads
  auto each = [](const char*, const auto& section) { section.validate(); };
  sections.visit_sections(each);
  // Across sections.
  if (c.optim.impl == OptimImpl::kTorch && (c.bcd.enabled || c.train.dtype != Dtype::kFp32))
    user_error("config: [optim] impl = \"torch\" supports only full-parameter fp32 training; use \"fused\"");
  if (c.optim.impl == OptimImpl::kTorch && c.train.checkpoint_every > 0)
    user_error("config: [train] checkpoint_every: checkpoints need [optim] impl = \"fused\" (got \"torch\")");
}

namespace {
struct ResumeLister {
  std::string section;
  std::vector<std::pair<std::string, Resume>> out;
  template <class T>
  void operator()(const char* key, T&, const char*, Resume r) {
    out.emplace_back(section + "." + key, r);
  }
};
}  // namespace

namespace {
// Every key of `cfg` in order through `lister` (its `section` set before each section's keys):
// what it collected in `out`.
template <class Lister>
auto list_each_key(Config& cfg, Lister lister) {
  auto each = [&](const char* name, auto& section) {
    lister.section = name;
    section.visit(lister);
  };
  cfg.visit_sections(each);
  return std::move(lister.out);
}
}  // namespace

std::vector<std::pair<std::string, Resume>> resume_classes() {
  Config cfg;
  return list_each_key(cfg, ResumeLister{});
}

std::string config_to_toml(const Config& given) {
  Config cfg = given;  // the visitor walks mutable sections
  toml::table root;
  auto visit = [&](const char* name, auto& section) {
    toml::table t;
    FieldWriter w{t};
    section.visit(w);
    root.insert(name, std::move(t));
  };
  cfg.visit_sections(visit);
  std::ostringstream os;
  os << root << "\n";
  return os.str();
}

std::vector<std::pair<std::string, std::string>> config_values(Config& cfg) { return list_each_key(cfg, ValueLister{}); }

std::string config_reference() {
  Config cfg;
  std::ostringstream os;
  auto visit = [&](const char* name, auto& section) {
    os << "\n### [" << name << "]\n\n| key | default | meaning |\n|---|---|---|\n";
    DocWriter w{os};
    section.visit(w);
  };
  cfg.visit_sections(visit);
  return os.str();
}

}  // namespace bcd
