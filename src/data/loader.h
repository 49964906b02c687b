// Deterministic batch loader: (B, T+1) windows of a token split, seeded, resumable, prefetched.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "data/dataset.h"

namespace bcd {

// One dataset of a mixture and its share of the windows (weights need not sum to 1).
struct DataSource {
  TokenDataset ds;
  double weight = 1;
};

// A mixture's position in one of its datasets other than the first.
struct SourcePosition {
  uint64_t epoch = 0, cursor = 0;
  bool operator==(const SourcePosition& o) const { return epoch == o.epoch && cursor == o.cursor; }
};

// Where the loader is: enough to continue exactly (saved in checkpoints).
struct LoaderState {
  LoaderState() = default;
  LoaderState(uint64_t epoch, uint64_t cursor) : epoch(epoch), cursor(cursor) {}
  uint64_t epoch = 0;     // passes over the split so far (a mixture: over its first dataset's)
  uint64_t cursor = 0;    // windows already handed out in this epoch
  // A mixture of N > 1 datasets: windows drawn from all of them so far, and datasets 1..N-1's
  // positions (0 and empty for one dataset).
  uint64_t drawn = 0;
  std::vector<SourcePosition> more;
  bool operator==(const LoaderState& o) const {
    return epoch == o.epoch && cursor == o.cursor && drawn == o.drawn && more == o.more;
  }
};

class DataLoader {
 public:
  // Each epoch draws a fresh shift in [0, T) and a fresh permutation of the non-overlapping
  // (T+1)-token windows from (seed, epoch), so the sequence of batches is a pure function of
  // (seed, state). `shuffle = false` gives windows in order from offset 0 (validation).
  // UserError when the split holds fewer than T+1 tokens (names the dataset and the numbers).
  // Data parallel: each batch is rank `rank`'s B rows of a global batch of world_size * B
  // windows, and state() is that of the global sequence (the same on every rank).
  DataLoader(const TokenDataset& ds, Split split, int64_t batch_size, int64_t seq_len,
             uint64_t seed, bool shuffle = true, bool prefetch = true, int rank = 0, int world_size = 1);
  // A mixture: window number g of the sequence (LoaderState::drawn) comes from dataset i with
  // probability weight_i / sum(weights), drawn from (seed, g) alone; each dataset's windows follow
  // their own epochs as above (dataset i > 0 seeded from (seed, i)), so the sequence is a pure
  // function of (seed, state) here too. Batches carry a mask when any dataset has one (a plain
  // dataset's windows count every target). One source is exactly the constructor above.
  DataLoader(std::vector<DataSource> sources, Split split, int64_t batch_size, int64_t seq_len,
             uint64_t seed, bool shuffle = true, bool prefetch = true, int rank = 0, int world_size = 1);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch; the one after it is being assembled on a background thread (TBB).
  Batch next();
  // State as of the next call to next(), and restoring it (drops any prefetched batch).
  LoaderState state() const;
  void restore(const LoaderState& s);
  // Windows in an epoch of the split; a mixture: the expected draws before its first dataset to
  // run out of windows starts a second epoch (no window is drawn twice before that).
  int64_t windows_per_epoch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bcd
