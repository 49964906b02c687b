// Deterministic batch loader: (B, T+1) windows of a token split, seeded, resumable, prefetched.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "io/dataset.h"

namespace bcd {

// One rank's rows of a step's global batch.
// B = batch, T = seq_len.
struct Batch {
  torch::Tensor tokens;  // (B, T+1) int64: inputs tokens[:, :T], targets tokens[:, 1:]
  // (B, T) float32, 1 where the target counts in the loss (instruction data: response tokens),
  // 0 where it does not; undefined when every target counts (plain text).
  torch::Tensor mask;
  // What the loss divides its sum over counted targets by: the counted targets of the whole
  // global batch (all ranks' rows) over the number of ranks, so the ranks' mean of their losses
  // is the global batch's mean per counted target. B * T without a mask; 0 when no target of
  // the global batch counts (the loss is then 0).
  double divisor = 0;
};

// Where the loader is: enough to continue exactly (saved in checkpoints).
struct LoaderState {
  uint64_t epoch = 0;     // passes over the split so far
  uint64_t cursor = 0;    // windows already handed out in this epoch
  bool operator==(const LoaderState& o) const { return epoch == o.epoch && cursor == o.cursor; }
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
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch; the one after it is being assembled on a background thread (TBB).
  Batch next();
  // State as of the next call to next(), and restoring it (drops any prefetched batch).
  LoaderState state() const;
  void restore(const LoaderState& s);
  int64_t windows_per_epoch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bcd
