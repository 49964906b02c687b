// HF model directory -> our blocks: locate every tensor (single file or shards), check names,
// dtypes and shapes against the model config, then read and convert.
#include "model/hf_import.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <memory>
#include <set>

#include "model/weights.h"
#include "model/hf_config.h"
#include "model/hf_weights.h"
#include "model/safetensors.h"
#include "base/config.h"
#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"
#include "data/tokenizer.h"
#include "base/progress.h"
#include "base/stop.h"

namespace bcd {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// weight_map of model.safetensors.index.json: tensor name -> shard file name (same directory).
std::map<std::string, std::string> read_weight_map(const std::string& index) {
  json j;
  try {
    j = read_json_file(index, kJsonMetadata, "safetensors index");
  } catch (const json::exception& e) {
    user_error("{}: invalid JSON ({})", index, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    user_error("{}: expected a JSON object with a \"weight_map\" object", index);
  std::map<std::string, std::string> out;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    const std::string shard = it->is_string() ? it->get<std::string>() : "";
    // A shard is a plain file name beside the index: no directories, no way out of DIR.
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
        shard.size() < 12 || shard.compare(shard.size() - 12, 12, ".safetensors") != 0)
      user_error("{}: weight_map entry for tensor \"{}\" is {}: expected a .safetensors file name in the same directory",
                 index, it.key(), it->dump());
    out[it.key()] = shard;
  }
  return out;
}

// The safetensors files of a HF directory, headers read and checked (no tensor data yet).
struct HfFiles {
  std::vector<std::unique_ptr<st::SafetensorsFile>> files;
  std::map<std::string, std::string> weight_map;               // sharded only
  std::map<std::string, const st::SafetensorsFile*> shard_of;  // shard file name -> file
};

// A file of the HF directory must be a regular file (symbolic links to one included): a pipe
// would block the open until something wrote to it, a device would be read without end.
void require_regular(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    user_error("{}: not a regular file (a pipe, device or directory): a Hugging Face model directory's files are "
               "plain files", path);
}

HfFiles open_hf_files(const std::string& dir) {
  const std::string single = dir + "/" + kSingleFile, index = dir + "/" + kIndexFile;
  HfFiles hf;
  if (fs::exists(single)) {
    require_regular(single);
    hf.files.push_back(std::make_unique<st::SafetensorsFile>(single));
  } else if (fs::exists(index)) {
    require_regular(index);
    hf.weight_map = read_weight_map(index);
    if (hf.weight_map.empty()) user_error("{}: weight_map lists no tensors", index);
    for (const auto& [name, shard] : hf.weight_map) {
      if (hf.shard_of.count(shard)) continue;
      const std::string path = dir + "/" + shard;
      if (!fs::exists(path)) user_error("{}: shard not found (listed in {} for tensor {})", path, index, name);
      require_regular(path);
      hf.files.push_back(std::make_unique<st::SafetensorsFile>(path));
      hf.shard_of[shard] = hf.files.back().get();
    }
  } else {
    user_error("{}: no {} or {} (only safetensors checkpoints are supported)", dir, kSingleFile, kIndexFile);
  }
  return hf;
}

// One tensor of the model, found in DIR.
struct Located {
  const HfTensor* want = nullptr;
  const st::SafetensorsFile* file = nullptr;
  const st::TensorInfo* info = nullptr;
};

// The weights of the model `mc` describes, in DIR's safetensors: every tensor located and
// checked on construction (before anything is written anywhere), then read a range of a block's
// flat buffer at a time, converted to fp32. What it holds is the headers and one piece's bytes:
// never a whole tensor, so importing a model takes memory independent of its size.
class HfSource {
 public:
  HfSource(const ModelConfig& mc, const std::string& dir, const std::string& shape_source);

  // Elements [first, first + count) of block `block`'s flat buffer: its tensors' values, zero in
  // the padding between them. count <= kStatePieceElems.
  void fill(int block, uint64_t first, float* out, uint64_t count);
  uint64_t tensor_bytes() const { return tensor_bytes_; }
  uint64_t bytes_filled() const { return bytes_filled_; }  // of tensor_bytes(), by fill()
  HfImportInfo info() const;

 private:
  void check_tied_head(const st::SafetensorsFile& head_file, const st::TensorInfo& head, const Located& emb);
  // Elements [first, first + count) of the tensor, as fp32.
  void read_fp32(const st::SafetensorsFile& f, const st::TensorInfo& t, uint64_t first, uint64_t count, float* out);

  std::vector<HfTensor> want_;
  HfFiles hf_;
  std::vector<std::vector<Located>> by_block_;  // each block's tensors in layout order
  std::vector<uint8_t> scratch_;                // a piece's bytes as stored
  uint64_t tensor_bytes_ = 0, bytes_filled_ = 0;
};

HfSource::HfSource(const ModelConfig& mc, const std::string& dir, const std::string& shape_source)
    : want_(hf_tensor_map(mc)), hf_(open_hf_files(dir)) {
  std::map<std::string, const HfTensor*> wanted;
  for (const HfTensor& w : want_) wanted[w.name] = &w;
  const bool tied = mc.tie_embeddings;
  const std::string index = dir + "/" + kIndexFile;
  const auto& files = hf_.files;
  const auto& weight_map = hf_.weight_map;
  const auto& shard_of = hf_.shard_of;

  // ---- Locate and check every tensor ----
  std::vector<Located> found;
  for (const HfTensor& w : want_) {
    Located l{&w, files.front().get(), nullptr};
    if (weight_map.empty()) {
      l.info = l.file->header().find(w.name);
      if (!l.info) user_error("{}: tensor {} missing (expected {} for {})", l.file->path(), w.name, format_shape(w.shape), shape_source);
    } else {
      auto it = weight_map.find(w.name);
      if (it == weight_map.end()) user_error("{}: tensor {} missing from weight_map", index, w.name);
      l.file = shard_of.at(it->second);
      l.info = l.file->header().find(w.name);
      if (!l.info) user_error("{}: tensor {} missing (listed for this shard in {})", l.file->path(), w.name, index);
    }
    if (!hf_float_dtype(l.info->dtype))
      user_error("{}: tensor {}: dtype {} is not supported (expected BF16, F16 or F32)", l.file->path(), w.name,
                 st::dtype_name(l.info->dtype));
    if (l.info->shape != w.shape)
      user_error("{}: tensor {}: shape {}, expected {} for {}", l.file->path(), w.name, format_shape(l.info->shape),
                 format_shape(w.shape), shape_source);
    found.push_back(l);
  }
  // Nothing beyond the model: a stray tensor means the config does not describe these weights.
  const st::TensorInfo* tied_head = nullptr;
  const st::SafetensorsFile* tied_head_file = nullptr;
  for (const auto& f : files) {
    for (const st::TensorInfo& t : f->header().tensors) {
      if (hf_ignored_tensor(t.name)) continue;
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it == weight_map.end() || shard_of.at(it->second) != f.get())
          user_error("{}: tensor {} is not listed for this file in {}", f->path(), t.name, index);
      }
      if (wanted.count(t.name)) continue;
      if (tied && t.name == "lm_head.weight" && t.shape == want_.front().shape && hf_float_dtype(t.dtype)) {
        tied_head = &t, tied_head_file = f.get();
        continue;
      }
      user_error("{}: unexpected tensor {} (shape {}): not part of this model ({})", f->path(), t.name,
                 format_shape(t.shape), shape_source);
    }
  }
  for (const auto& [name, shard] : weight_map)
    if (!wanted.count(name) && !hf_ignored_tensor(name) && !(tied && name == "lm_head.weight"))
      user_error("{}: unexpected tensor {} in weight_map: not part of this model ({})", index, name, shape_source);
  if (tied_head) check_tied_head(*tied_head_file, *tied_head, found.front());

  by_block_.resize(static_cast<size_t>(model_block_count(mc)));
  for (const Located& l : found) {
    by_block_[static_cast<size_t>(l.want->block)].push_back(l);
    tensor_bytes_ += l.info->nbytes();
  }
  for (auto& b : by_block_)
    std::sort(b.begin(), b.end(), [](const Located& x, const Located& y) { return x.want->offset < y.want->offset; });
}

void HfSource::read_fp32(const st::SafetensorsFile& f, const st::TensorInfo& t, uint64_t first, uint64_t count,
                         float* out) {
  const uint64_t es = st::dtype_size(t.dtype);
  if (t.dtype == st::Dtype::kF32) return f.read(t, first * es, count * es, out);
  scratch_.resize(std::max<uint64_t>(scratch_.size(), count * es));
  f.read(t, first * es, count * es, scratch_.data());
  const auto n = static_cast<int64_t>(count);
  torch::from_blob(out, {n}, torch::kFloat32).copy_(torch::from_blob(scratch_.data(), {n}, torch_dtype_of(t.dtype)));
}

// Some tied checkpoints still store lm_head; it must be the embedding, or tying changes the
// model. Compared a piece at a time, as fp32 values (as torch::equal: -0 == 0, NaN never equal).
void HfSource::check_tied_head(const st::SafetensorsFile& head_file, const st::TensorInfo& head, const Located& emb) {
  const uint64_t n = static_cast<uint64_t>(head.numel());
  const uint64_t piece = std::min<uint64_t>(n, kStatePieceElems / 2);
  std::vector<float> a(piece), b(piece);
  for (uint64_t first = 0; first < n; first += piece) {
    check_stop();
    const uint64_t count = std::min(piece, n - first);
    read_fp32(head_file, head, first, count, a.data());
    read_fp32(*emb.file, *emb.info, first, count, b.data());
    for (uint64_t i = 0; i < count; ++i)
      if (!(a[i] == b[i]))
        user_error("{}: lm_head.weight differs from model.embed_tokens.weight but tie_word_embeddings is true",
                   head_file.path());
  }
}

void HfSource::fill(int block, uint64_t first, float* out, uint64_t count) {
  check_stop();
  const uint64_t end = first + count;
  uint64_t done = first;  // [first, done) is filled; tensors come in layout order
  for (const Located& l : by_block_.at(static_cast<size_t>(block))) {
    const auto begin_t = static_cast<uint64_t>(l.want->offset), end_t = begin_t + static_cast<uint64_t>(l.want->numel());
    const uint64_t lo = std::max(first, begin_t), hi = std::min(end, end_t);
    if (lo >= hi) continue;
    std::fill(out + (done - first), out + (lo - first), 0.0f);  // the padding before it
    read_fp32(*l.file, *l.info, lo - begin_t, hi - lo, out + (lo - first));
    bytes_filled_ += (hi - lo) * st::dtype_size(l.info->dtype);
    done = hi;
  }
  std::fill(out + (done - first), out + count, 0.0f);
}

HfImportInfo HfSource::info() const {
  std::map<st::Dtype, int64_t> elems_by_dtype;
  for (const auto& b : by_block_)
    for (const Located& l : b) elems_by_dtype[l.info->dtype] += l.info->numel();
  HfImportInfo info;
  int64_t best = -1;
  for (const auto& [d, n] : elems_by_dtype)
    if (n > best) best = n, info.dtype = short_dtype_name(d);
  for (const auto& f : hf_.files) info.files.push_back(f->path());
  for (const auto& b : by_block_) info.n_tensors += static_cast<int64_t>(b.size());
  return info;
}

std::string shape_source(const ModelConfig& mc) { return mc.hf_config.empty() ? "the model config" : mc.hf_config; }

}  // namespace

HfImportInfo import_hf_weights(LlamaModel& model, const std::string& dir) {
  if (!fs::is_directory(dir)) user_error("{}: not a directory (expected a Hugging Face model directory)", dir);
  HfSource src(model.config(), dir, shape_source(model.config()));
  torch::NoGradGuard ng;
  Progress reading("importing " + dir, src.tensor_bytes(), "B");
  fill_model(model, [&](int block, uint64_t first, float* out, uint64_t count) {
    src.fill(block, first, out, count);
    reading.set(src.bytes_filled());
  });
  reading.finish();
  return src.info();
}

void load_initial_weights(LlamaModel& model, const std::string& init_from) {
  if (init_from.empty()) return;
  const std::string dir = hf_init_dir(init_from);
  if (!dir.empty()) {
    import_hf_weights(model, dir);
    return;
  }
  const ModelConfig f = model_config_from_weights(init_from, ModelConfig{});
  const ModelConfig& m = model.config();
  auto same = [&](const char* key, int64_t in_file, int64_t in_model) {
    if (in_file != in_model)
      user_error("{}: the weights file has {} = {}, the model config has {}", init_from, key, in_file, in_model);
  };
  same("vocab_size", f.vocab_size, m.vocab_size);
  same("d_model", f.d_model, m.d_model);
  same("n_layers", f.n_layers, m.n_layers);
  same("n_heads", f.n_heads, m.n_heads);
  same("n_kv_heads", f.kv_heads(), m.kv_heads());
  same("head dimension (d_head)", f.head_dim(), m.head_dim());
  same("d_ff", f.ff_dim(), m.ff_dim());
  auto same_flag = [&](const char* key, bool in_file, bool in_model) {
    if (in_file != in_model)
      user_error("{}: the weights file has {} = {}, the model config has {}", init_from, key, in_file, in_model);
  };
  same_flag("qkv_bias", f.qkv_bias, m.qkv_bias);
  same_flag("qk_norm", f.qk_norm, m.qk_norm);
  same_flag("tie_embeddings", f.tie_embeddings, m.tie_embeddings);
  load_weights(model, init_from);
}

HfImportSummary import_hf_to_file(const std::string& dir, const std::string& out) {
  const std::string cfg_path = dir + "/config.json";
  if (!fs::is_directory(dir)) user_error("{}: not a directory (expected a Hugging Face model directory)", dir);
  if (!fs::exists(cfg_path)) user_error("{}: missing (a Hugging Face model directory has config.json)", cfg_path);
  require_regular(cfg_path);
  const ModelConfig mc = model_config_from_hf(cfg_path, ModelConfig{});
  // The model is allocated from config.json: a config describing far more than the files hold
  // (num_hidden_layers = 100000) is refused here, before any memory goes to it. Smaller
  // disagreements are named tensor by tensor below.
  {
    int64_t stored = 0;
    for (const auto& f : open_hf_files(dir).files)
      for (const st::TensorInfo& t : f->header().tensors) stored += t.numel();
    const double implied = mc.n_params();
    if (implied > 2.0 * static_cast<double>(stored) + static_cast<double>(int64_t{1} << 20))
      user_error("{}: describes a model of {:.4g} parameters ({} layers, hidden size {}, intermediate size {}, vocabulary "
                 "{}), but the safetensors in {} hold only {} values: config.json does not match the weights",
                 cfg_path, implied, mc.n_layers, mc.d_model, mc.d_ff, mc.vocab_size, dir, stored);
  }
  const std::string config_text = read_json_text(cfg_path, kJsonConfig, "HF config");
  // Straight from the safetensors into the weights file, a piece at a time: the model is never
  // built, so an 8B model imports in the memory of a few pieces.
  HfSource src(mc, dir, cfg_path);
  HfImportSummary s;
  s.info = src.info();
  s.model_type = parse_json(config_text, kJsonConfig, cfg_path).value("model_type", "");
  s.n_params = count_params(mc);

  // The stored config is self-contained: the shape is in its fields, not in a path to DIR.
  Config cfg;
  cfg.model = mc;
  cfg.model.hf_config.clear();
  const fs::path out_path(out);
  const fs::path out_dir = out_path.has_parent_path() ? out_path.parent_path() : fs::path(".");
  try {
    fs::create_directories(out_dir);
  } catch (const fs::filesystem_error& e) {
    user_error("{}: cannot create the output directory ({})", out, e.code().message());
  }
  // The tokenizer that comes with the model is checked before anything is written: one this
  // program cannot read, or with more pieces than the model has rows, would only fail at prepare
  // or train time, after the import said it was done.
  const std::string tok = find_tokenizer(dir);
  if (!tok.empty()) check_model_tokenizer(tok, mc.vocab_size, dir);
  Progress writing("importing " + dir + " into " + out, src.tensor_bytes(), "B");
  const std::vector<BlockShape> blocks = block_shapes(mc);
  save_weights(blocks, out, config_to_toml(cfg),
               {{"hf_config_json", config_text}, {"hf_dtype", s.info.dtype}, {"hf_source", fs::absolute(dir).string()}},
               [&](int block, uint64_t first, float* piece, uint64_t count) {
                 src.fill(block, first, piece, count);
                 writing.set(src.bytes_filled());
               });
  writing.finish();

  if (!tok.empty()) {
    s.tokenizer_files = copy_tokenizer_files(tok, out_dir.string(), /*both_forms=*/true);
    s.tokenizer = s.tokenizer_files.front();
  }
  return s;
}

}  // namespace bcd
