// Weights files of a LlamaModel: every block's flat buffer in a state file (io/state_file.h).
#include "model/weights.h"

#include <algorithm>
#include <optional>

#include "base/error.h"
#include "io/checkpoint.h"
#include "io/state_file.h"

namespace bcd {

namespace {
constexpr const char* kFormat = "bcdtrain-weights";
constexpr int64_t kVersion = 1;
constexpr const char* kNoun = "weights file";

// A weights file or a training checkpoint (the same /blocks and config attribute, more state).
StateFileReader open_checked(const std::string& path) {
  StateFileReader f(path, kNoun);
  const std::string format = f.format();
  if (format != kFormat && format != kCheckpointFormat)
    user_error("{}: not a bcdtrain weights file or checkpoint (format attribute {})", path,
               format.empty() ? "missing" : "\"" + format + "\"");
  return f;
}
}  // namespace

void save_weights(const std::vector<BlockShape>& blocks, const std::string& path, const std::string& config_toml,
                  const WeightsAttrs& extra_attrs, const BlockFill& fill) {
  StateFileWriter f(path, kFormat, kVersion, kNoun);
  f.attr("/", "config", config_toml);
  for (const auto& [name, value] : extra_attrs) f.attr("/", name, value);
  f.group("/blocks");
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int block = static_cast<int>(i);
    f.floats("/blocks/" + blocks[i].name, static_cast<uint64_t>(blocks[i].numel),
             [&](uint64_t first, float* out, uint64_t count) { fill(block, first, out, count); });
  }
  f.commit();
}

namespace {
// Name and size of each of the model's blocks: what a weights file holds of it.
std::vector<BlockShape> shapes_of(const LlamaModel& model) {
  std::vector<BlockShape> out(static_cast<size_t>(model.n_blocks()));
  for (int i = 0; i < model.n_blocks(); ++i) out[i].name = model.block(i).name(), out[i].numel = model.block(i).numel();
  return out;
}
}  // namespace

ModelPieces::ModelPieces(const LlamaModel& model) : model_(&model), open_(std::make_shared<Open>()) {}

void ModelPieces::operator()(int block, uint64_t first, float* out, uint64_t count) const {
  if (block != open_->block) {
    open_->access.reset();
    open_->access.emplace(*model_, block);
    open_->block = block;
  }
  const auto n = static_cast<int64_t>(count);
  torch::NoGradGuard ng;
  torch::from_blob(out, {n}, torch::kFloat32).copy_(model_->block(block).data().narrow(0, static_cast<int64_t>(first), n));
}

void fill_model(LlamaModel& model, const BlockFill& fill) {
  torch::NoGradGuard ng;
  std::vector<float> piece;
  for (int i = 0; i < model.n_blocks(); ++i) {
    Block& b = model.block(i);
    BlockAccess access(model, i);
    const auto n = static_cast<uint64_t>(b.numel());
    piece.resize(std::min<uint64_t>(n, kStatePieceElems));
    for (uint64_t first = 0; first < n; first += piece.size()) {
      const uint64_t count = std::min<uint64_t>(piece.size(), n - first);
      fill(i, first, piece.data(), count);
      const auto c = static_cast<int64_t>(count);
      b.data().narrow(0, static_cast<int64_t>(first), c).copy_(torch::from_blob(piece.data(), {c}, torch::kFloat32));
    }
    access.commit();
  }
}

void save_weights(const LlamaModel& model, const std::string& path, const std::string& config_toml,
                  const WeightsAttrs& extra_attrs) {
  save_weights(shapes_of(model), path, config_toml, extra_attrs, ModelPieces(model));
}

WeightsReader::WeightsReader(const std::string& path, const std::vector<BlockShape>& blocks)
    : file_(open_checked(path)) {
  for (const BlockShape& b : blocks) {
    const std::string name = "/blocks/" + b.name;
    if (!file_.has(name)) user_error("{}: block {} missing", path, b.name);
    const uint64_t n = file_.length(name);
    if (static_cast<int64_t>(n) != b.numel)
      user_error("{}: block {} has {} elements, the model expects {}", path, b.name, n, b.numel);
    datasets_.push_back(name);
  }
}

void WeightsReader::read(int block, uint64_t first, float* out, uint64_t count) const {
  file_.floats(datasets_.at(static_cast<size_t>(block)), first, out, count);
}

std::string read_weights_config(const std::string& path) {
  return open_checked(path).attr_str("/", "config");
}

std::string read_weights_attr(const std::string& path, const std::string& name) {
  const StateFileReader f = open_checked(path);
  return f.has_attr("/", name) ? f.attr_str("/", name) : "";
}

void load_weights(LlamaModel& model, const std::string& path) {
  // Every block's shape first, so a file for another model changes nothing; then one block at a
  // time, a piece at a time (a 13B model is 52 GB in fp32: never all of it in memory at once).
  const WeightsReader f(path, shapes_of(model));
  fill_model(model, [&](int block, uint64_t first, float* out, uint64_t count) { f.read(block, first, out, count); });
}

}  // namespace bcd
