// Config loading: TOML tables onto the typed structs of config.h, overrides, validation, dumps.
#include "base/config.h"

#include <toml++/toml.h>

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
  void operator()(const char* key, int64_t& f, const char*) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto v = n->as_integer()) f = v->get();
    else bad(key, *n, "an integer");
  }
  void operator()(const char* key, double& f, const char*) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto v = n->as_floating_point()) f = v->get();
    else if (auto i = n->as_integer()) f = static_cast<double>(i->get());
    else bad(key, *n, "a number");
    // TOML has nan and inf; no key takes them (and range checks like `x < 0` let NaN through).
    if (!std::isfinite(f)) user_error("{}: [{}] {}: expected a finite number, got {}", source, section, key, f);
  }
  void operator()(const char* key, bool& f, const char*) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto v = n->as_boolean()) f = v->get();
    else bad(key, *n, "a boolean (true or false)");
  }
  void operator()(const char* key, std::string& f, const char*) {
    known.insert(key);
    const toml::node* n = tbl.get(key);
    if (!n) return;
    if (auto v = n->as_string()) f = v->get();
    else bad(key, *n, "a string");
  }
  void operator()(const char* key, Bytes& f, const char*) {
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
  void operator()(const char* key, std::vector<std::string>& f, const char*) {
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
  void operator()(const char* key, std::vector<double>& f, const char*) {
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
  void operator()(const char* key, int64_t& f, const char*) { out.insert_or_assign(key, f); }
  void operator()(const char* key, double& f, const char*) { out.insert_or_assign(key, f); }
  void operator()(const char* key, bool& f, const char*) { out.insert_or_assign(key, f); }
  void operator()(const char* key, std::string& f, const char*) { out.insert_or_assign(key, f); }
  // Lossless and readable: "auto", "24GiB", "512MiB", or the integer byte count.
  void operator()(const char* key, Bytes& f, const char*) {
    if (f.is_auto) return void(out.insert_or_assign(key, "auto"));
    const uint64_t v = f.value;
    const std::pair<uint64_t, const char*> units[] = {{1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
    for (const auto& [u, name] : units)
      if (v >= u && v % u == 0) return void(out.insert_or_assign(key, std::to_string(v / u) + name));
    out.insert_or_assign(key, static_cast<int64_t>(v));
  }
  void operator()(const char* key, std::vector<std::string>& f, const char*) {
    toml::array a;
    for (const auto& s : f) a.push_back(s);
    out.insert_or_assign(key, std::move(a));
  }
  void operator()(const char* key, std::vector<double>& f, const char*) {
    toml::array a;
    for (double d : f) a.push_back(d);
    out.insert_or_assign(key, std::move(a));
  }
};

struct DocWriter {
  std::ostringstream& os;
  template <class T>
  void operator()(const char* key, T& f, const char* doc) {
    toml::table t;
    FieldWriter w{t};
    w(key, f, doc);
    std::ostringstream v;
    v << t;  // "key = value"
    std::string kv = v.str();
    const auto eq = kv.find(" = ");
    std::string value = eq == std::string::npos ? kv : kv.substr(eq + 3);
    while (!value.empty() && value.back() == '\n') value.pop_back();
    os << "| `" << key << "` | `" << value << "` | " << doc << " |\n";
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

void validate_config(const Config& c) {
  auto positive = [](const char* section, const char* key, int64_t v) {
    if (v <= 0) user_error("config: [{}] {} must be positive, got {}", section, key, v);
  };
  const ModelConfig& m = c.model;
  // With hf_config or init_from the shape comes from a file, checked when it is read.
  const bool shape_from_file = !m.hf_config.empty() || !m.init_from.empty();
  if (!m.init_from.empty()) {
    const bool hf = m.init_from.rfind("hf:", 0) == 0;
    const bool h5 = m.init_from.size() > 3 && m.init_from.compare(m.init_from.size() - 3, 3, ".h5") == 0;
    if ((hf && m.init_from.size() == 3) || (!hf && !h5))
      user_error("config: [model] init_from: expected \"hf:DIR\" or a path ending in .h5, got \"{}\"", m.init_from);
  }
  if (!shape_from_file) {
    positive("model", "d_model", m.d_model);
    positive("model", "n_layers", m.n_layers);
    positive("model", "n_heads", m.n_heads);
    if (m.vocab_size < 0) user_error("config: [model] vocab_size must be >= 0, got {}", m.vocab_size);
    if (m.n_kv_heads < 0) user_error("config: [model] n_kv_heads must be >= 0, got {}", m.n_kv_heads);
    if (m.d_ff < 0) user_error("config: [model] d_ff must be >= 0 (0 = 8/3 d_model), got {}", m.d_ff);
    if (m.d_model % m.n_heads != 0)
      user_error("config: [model] d_model ({}) must be divisible by n_heads ({})", m.d_model, m.n_heads);
    if (m.n_heads % m.kv_heads() != 0)
      user_error("config: [model] n_heads ({}) must be divisible by n_kv_heads ({})", m.n_heads,
                 m.kv_heads());
    if (m.head_dim() % 2 != 0)
      user_error("config: [model] head dimension d_model/n_heads = {} must be even for rotary embeddings",
                 m.head_dim());
    positive("model", "max_seq_len", m.max_seq_len);
    if (m.rope_theta <= 0) user_error("config: [model] rope_theta must be positive");
    if (m.norm_eps <= 0) user_error("config: [model] norm_eps must be positive");
  }
  if (m.init_std < 0) user_error("config: [model] init_std must be >= 0, got {}", m.init_std);
  const TrainConfig& t = c.train;
  positive("train", "steps", t.steps);
  if (t.checkpoint_every < 0) user_error("config: [train] checkpoint_every must be >= 0");
  if (t.keep_checkpoints < 0) user_error("config: [train] keep_checkpoints must be >= 0");
  positive("train", "batch_size", t.batch_size);
  positive("train", "seq_len", t.seq_len);
  positive("train", "grad_accum", t.grad_accum);
  positive("train", "log_every", t.log_every);
  positive("train", "val_batches", t.val_batches);
  if (t.lr <= 0) user_error("config: [train] lr must be positive, got {}", t.lr);
  if (t.warmup_steps < 0) user_error("config: [train] warmup_steps must be >= 0");
  if (t.min_lr_ratio < 0 || t.min_lr_ratio > 1)
    user_error("config: [train] min_lr_ratio must be in [0, 1], got {}", t.min_lr_ratio);
  if (t.grad_clip < 0) user_error("config: [train] grad_clip must be >= 0");
  if (t.peak_tflops < 0) user_error("config: [train] peak_tflops must be >= 0 (0 = from the GPU's name)");
  if (t.val_every < 0) user_error("config: [train] val_every must be >= 0");
  if (t.threads < 0) user_error("config: [train] threads must be >= 0");
  if (t.run_dir.empty()) user_error("config: [train] run_dir must not be empty");
  if (t.dtype != "fp32" && t.dtype != "bf16")
    user_error("config: [train] dtype: expected \"fp32\" or \"bf16\", got \"{}\"", t.dtype);
  if (t.device != "cpu" && t.device != "cuda" && t.device != "auto")
    user_error("config: [train] device: expected \"cpu\", \"cuda\" or \"auto\", got \"{}\"", t.device);
  if (!shape_from_file && t.seq_len > m.max_seq_len)
    user_error("config: [train] seq_len ({}) exceeds [model] max_seq_len ({})", t.seq_len, m.max_seq_len);
  const OptimConfig& o = c.optim;
  if (o.impl != "torch" && o.impl != "fused")
    user_error("config: [optim] impl: expected \"fused\" or \"torch\", got \"{}\"", o.impl);
  const BcdConfig& b = c.bcd;
  if (o.impl == "torch" && (b.enabled || t.dtype != "fp32"))
    user_error("config: [optim] impl = \"torch\" supports only full-parameter fp32 training; use \"fused\"");
  positive("bcd", "switch_every", b.switch_every);
  positive("bcd", "layers_per_block", b.layers_per_block);
  if (b.order != "random" && b.order != "ascending" && b.order != "descending" && b.order != "fixed")
    user_error("config: [bcd] order: expected random, ascending, descending or fixed, got \"{}\"", b.order);
  if (b.order == "fixed" && b.fixed_order.empty())
    user_error("config: [bcd] fixed_order must list block names when order = \"fixed\"");
  if (b.blocks != "layer" && b.blocks != "attn_mlp" && b.blocks != "whole")
    user_error("config: [bcd] blocks: expected layer, attn_mlp or whole, got \"{}\"", b.blocks);
  if (b.blocks == "attn_mlp" && b.layers_per_block != 1)
    user_error("config: [bcd] layers_per_block must be 1 with blocks = \"attn_mlp\"");
  if (b.state_on_switch != "keep" && b.state_on_switch != "reset")
    user_error("config: [bcd] state_on_switch: expected keep or reset, got \"{}\"", b.state_on_switch);
  if (b.visit_warmup < 0 || (b.enabled && b.visit_warmup >= b.switch_every))
    user_error("config: [bcd] visit_warmup: expected 0 up to switch_every - 1 ({}), got {}", b.switch_every - 1, b.visit_warmup);
  // The AdamW kernels take the betas in fp32: 0.99999999 would round to 1 there.
  if (o.beta1 < 0 || static_cast<float>(o.beta1) >= 1)
    user_error("config: [optim] beta1 must be in [0, 1) in single precision, got {}", o.beta1);
  if (o.beta2 < 0 || static_cast<float>(o.beta2) >= 1)
    user_error("config: [optim] beta2 must be in [0, 1) in single precision, got {}", o.beta2);
  if (o.eps <= 0) user_error("config: [optim] eps must be positive");
  if (o.weight_decay < 0) user_error("config: [optim] weight_decay must be >= 0");
  const MemoryConfig& mem = c.memory;
  positive("memory", "prefetch_depth", mem.prefetch_depth);
  if (mem.home != "auto" && mem.home != "host" && mem.home != "nvme")
    user_error("config: [memory] home: expected auto, host or nvme, got \"{}\"", mem.home);
  for (const auto& p : mem.nvme_paths)
    if (p.empty()) user_error("config: [memory] nvme_paths: an entry is empty");
  if (mem.stream_weights != "auto" && mem.stream_weights != "on" && mem.stream_weights != "off")
    user_error("config: [memory] stream_weights: expected auto, on or off, got \"{}\"", mem.stream_weights);
  if (mem.stream_home != "auto" && mem.stream_home != "host" && mem.stream_home != "nvme")
    user_error("config: [memory] stream_home: expected auto, host or nvme, got \"{}\"", mem.stream_home);
  if (mem.stream_depth < 2 || mem.stream_depth > 16)
    user_error("config: [memory] stream_depth: expected 2 to 16 window buffers, got {}", mem.stream_depth);
  if (!(mem.stream_gbps >= 0) || mem.stream_gbps > 1e6)
    user_error("config: [memory] stream_gbps: expected GB/s >= 0 (0: by device), got {}", mem.stream_gbps);
  if (!(mem.stream_nvme_gbps >= 0) || mem.stream_nvme_gbps > 1e6)
    user_error("config: [memory] stream_nvme_gbps: expected GB/s >= 0 (0: by device), got {}", mem.stream_nvme_gbps);
  if (!(mem.stream_tflops >= 0) || mem.stream_tflops > 1e6)
    user_error("config: [memory] stream_tflops: expected TFLOP/s >= 0 (0: by device), got {}", mem.stream_tflops);
  const DistConfig& d = c.dist;
  if (d.backend != "auto" && d.backend != "gloo" && d.backend != "nccl")
    user_error("config: [dist] backend: expected auto, gloo or nccl, got \"{}\"", d.backend);
  positive("dist", "timeout_s", d.timeout_s);
  if (d.bucket_bytes.is_auto || d.bucket_bytes.value < 4096)
    user_error("config: [dist] bucket_bytes must be a size of at least 4KiB");
  const SampleConfig& s = c.sample;
  if (s.max_new_tokens < 0) user_error("config: [sample] max_new_tokens must be >= 0");
  if (s.temperature < 0) user_error("config: [sample] temperature must be >= 0");
  if (s.top_k < 0) user_error("config: [sample] top_k must be >= 0");
  if (s.top_p <= 0 || s.top_p > 1) user_error("config: [sample] top_p must be in (0, 1]");
  // The names io/chat.h knows (this floor cannot ask it), so a typo stops the run before it trains.
  static const std::set<std::string> kChat = {"auto", "none", "plain", "llama2", "llama3", "chatml"};
  if (!kChat.count(s.chat_template))
    user_error("config: [sample] chat_template: expected auto, none, plain, llama2, llama3 or chatml, got \"{}\"",
               s.chat_template);
}

std::string config_to_toml(Config& cfg) {
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
