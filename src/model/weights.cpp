// Weights files of a LlamaModel: every block's flat buffer in a state file (io/state_file.h).
#include "model/weights.h"

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

void save_weights(const LlamaModel& model, const std::string& path, const std::string& config_toml,
                  const std::vector<std::pair<std::string, std::string>>& extra_attrs) {
  StateFileWriter f(path, kFormat, kVersion, kNoun);
  f.attr("/", "config", config_toml);
  for (const auto& [name, value] : extra_attrs) f.attr("/", name, value);
  f.group("/blocks");
  for (int i = 0; i < model.n_blocks(); ++i) {
    const Block& b = model.block(i);
    const BlockAccess access(model, i);
    torch::Tensor d = b.data().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    f.floats("/blocks/" + b.name(), d.data_ptr<float>(), static_cast<uint64_t>(d.numel()));
  }
  f.commit();
}

std::string read_weights_config(const std::string& path) {
  return open_checked(path).attr_str("/", "config");
}

std::string read_weights_attr(const std::string& path, const std::string& name) {
  const StateFileReader f = open_checked(path);
  return f.has_attr("/", name) ? f.attr_str("/", name) : "";
}

void load_weights(LlamaModel& model, const std::string& path) {
  const StateFileReader f = open_checked(path);
  // Every block's shape first, so a file for another model changes nothing; then one block at a
  // time (a 13B model is 52 GB in fp32: never all of it in memory at once).
  for (int i = 0; i < model.n_blocks(); ++i) {
    const Block& b = model.block(i);
    const std::string name = "/blocks/" + b.name();
    if (!f.has(name)) user_error("{}: block {} missing", path, b.name());
    const uint64_t n = f.length(name);
    if (static_cast<int64_t>(n) != b.numel())
      user_error("{}: block {} has {} elements, the model expects {}", path, b.name(), n, b.numel());
  }
  torch::NoGradGuard ng;
  for (int i = 0; i < model.n_blocks(); ++i) {
    Block& b = model.block(i);
    torch::Tensor t = torch::empty({b.numel()}, torch::kFloat32);
    f.floats("/blocks/" + b.name(), t.data_ptr<float>(), static_cast<uint64_t>(b.numel()));
    BlockAccess access(model, i);
    b.data().copy_(t);
    access.commit();
  }
}

}  // namespace bcd
