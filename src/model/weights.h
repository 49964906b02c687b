// Model weights file (<run_dir>/model.h5): every block's flat working buffer plus the config, in
// a state file (io/state_file.h: atomic write, checksummed datasets). Full training checkpoints
// (io/checkpoint.h: optimizer state, scheduler, data position) build on this layout.
//   /blocks/<block name>  float32 [numel]   (the block's flat buffer, padding included)
//   root attributes: format ("bcdtrain-weights"), version, config (TOML text), and any extra
//   string attributes the writer was given (an import from HF adds hf_config_json, hf_dtype,
//   hf_source). Training checkpoints (format "bcdtrain-checkpoint") are a superset of this
//   layout, so every reader here accepts them too.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/model_shape.h"
#include "io/state_file.h"
#include "model/llama.h"

namespace bcd {

using WeightsAttrs = std::vector<std::pair<std::string, std::string>>;

// Writes atomically: a temporary file in the same directory, fsync, rename. A block at a time,
// a piece (io/state_file.h's kStatePieceElems) at a time: no more than a piece is copied.
void save_weights(const LlamaModel& model, const std::string& path, const std::string& config_toml,
                  const WeightsAttrs& extra_attrs = {});

// The same file for blocks that need not be in memory: block i (blocks[i]: its name and numel
// count) is produced by fill(i, first, out, count), called in order a piece at a time. An
// import from HF writes the model this way straight from its safetensors.
using BlockFill = std::function<void(int block, uint64_t first, float* out, uint64_t count)>;
void save_weights(const std::vector<BlockShape>& blocks, const std::string& path, const std::string& config_toml,
                  const WeightsAttrs& extra_attrs, const BlockFill& fill);

// A weights file or checkpoint open to read blocks by ranges: on open every block of `blocks`
// is checked present and of its numel (UserError naming the file and block, so a file for
// another model is refused before anything is read).
class WeightsReader {
 public:
  WeightsReader(const std::string& path, const std::vector<BlockShape>& blocks);
  // Elements [first, first + count) of block `block`'s flat buffer, fp32.
  void read(int block, uint64_t first, float* out, uint64_t count) const;
  const std::string& path() const { return file_.path(); }

 private:
  StateFileReader file_;
  std::vector<std::string> datasets_;
};

// A model's blocks a piece at a time, as fp32 (what save_weights and an export from a model
// read): a block stays open (fetched from its tier once) from its first piece to the next
// block's. BlockFill's signature: pass it where one is wanted (copies share the open block).
class ModelPieces {
 public:
  explicit ModelPieces(const LlamaModel& model);
  void operator()(int block, uint64_t first, float* out, uint64_t count) const;

 private:
  struct Open {
    std::optional<BlockAccess> access;
    int block = -1;
  };
  const LlamaModel* model_;
  std::shared_ptr<Open> open_;
};

// Fills every block of `model` from `fill`, a block at a time (open, filled, committed home), a
// piece at a time through an fp32 buffer (the model's dtype may be bf16).
void fill_model(LlamaModel& model, const BlockFill& fill);

// Reads the config TOML stored in a weights file; UserError naming the file when unreadable.
std::string read_weights_config(const std::string& path);

// A root string attribute of a weights file; "" when the file lacks it.
std::string read_weights_attr(const std::string& path, const std::string& name);

// Loads every block's buffer into `model`, a piece at a time; UserError naming the file and block
// on any mismatch (missing block, wrong size); the model is untouched unless every block checks out.
void load_weights(LlamaModel& model, const std::string& path);

}  // namespace bcd
