// Deterministic batch loader: which windows each epoch visits (shift and permutation drawn from
// a splitmix64 stream of (seed, epoch)), batch assembly, and one batch of prefetch on TBB.
// Windows are read from the file as batches are assembled (TokenDataset::read_tokens), so the
// loader's memory is a batch or two whatever the size of the corpus.
//
// Sampling, with n = tokens in the split, T = seq_len, B = batch_size:
//   S = min(T, n - T) shifts when shuffling, S = 1 (shift 0) otherwise;
//   W = floor((n - S) / T) windows in every epoch (windows_per_epoch), >= 1 because n >= T + 1.
//   Epoch e draws shift_e uniform in [0, S), then a Fisher-Yates permutation P_e of [0, W), both
//   from Rng(seed, e); without shuffle shift_e = 0 and P_e is the identity. Past 2^20 windows
//   (128M tokens at T = 128) P_e is a keyed Feistel permutation computed window by window
//   instead, its key the next draw of Rng(seed, e), so the loader's memory stays flat.
//   Window k of epoch e is tokens[shift_e + P_e[k]*T, shift_e + P_e[k]*T + T + 1); the largest
//   ends at most at (S-1) + (W-1)*T + T + 1 <= n. Windows start T apart, so their inputs tile
//   the stream and a window's last token (a target only) is the first input of the window that
//   follows it in the stream.
//   Fixing W per split (rather than floor((n - 1 - shift_e) / T)) drops at most one window in an
//   epoch but makes LoaderState::cursor mean the same thing in every epoch.
//   A batch is the next B windows in (epoch, k) order, carrying on into the next epoch when one
//   runs out; state() is normalized so that cursor < W.
//   Data parallel over R ranks: a step's global batch is the next R*B windows, and rank r takes
//   rows [r*B, (r+1)*B) of it. Every rank advances by R*B, so the state is the same on all ranks
//   and R ranks x B see exactly the windows of one rank x R*B.
//   A rank reads the tokens of its own B windows only.
//   Instruction data: a window's mask is its targets' entries of the split's loss mask,
//   mask[start + 1, start + T + 1), and every rank reads and counts the mask over the whole
//   global batch (all R*B windows, a byte each per target) so the loss divides by the global
//   count (Batch::divisor) without a collective.
//   Mixture of N datasets with shares p_i (weights over their sum): window number g of the
//   sequence (LoaderState::drawn, counted over all ranks' rows) draws u_g uniform in [0, 1) from
//   (seed, g) and takes the next window of the dataset i with p_0 + ... + p_{i-1} <= u_g <
//   p_0 + ... + p_i, in that dataset's own epochs (seeded by seed for i = 0, by (seed, i) after),
//   so dataset 0 alone would see exactly the windows it sees in the mixture, in the same order.
//   A plain dataset's windows count every target in a mixture whose batches carry a mask.
#include "data/loader.h"

#include <tbb/task_group.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"

namespace bcd {

namespace {

// splitmix64 (Steele, Lea & Flood 2014; constants from Vigna's reference code). We use our own
// generator and shuffle because std::shuffle's algorithm is implementation-defined, and the
// batch sequence must be identical on every standard library.
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  Rng(uint64_t seed, uint64_t epoch) : s_(mix64(seed ^ mix64(epoch + kGolden))) {}
  uint64_t next() { return mix64(s_ += kGolden); }
  // Uniform in [0, n) without modulo bias (Lemire 2019, "Fast random integer generation in an
  // interval", Alg. 5).
  uint64_t below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t s_;
};

// Past this many windows in an epoch, the visiting order is not stored (8 bytes a window, which
// would grow with the corpus: 50 MB for a 2 GB text corpus at T = 128) but computed window by
// window: a keyed Feistel permutation of [0, 4^h) >= W, cycle-walked into [0, W).
constexpr uint64_t kMaxStoredOrder = uint64_t{1} << 20;

// A pseudo-random permutation of [0, n) in O(1) memory: a 4-round balanced Feistel network on
// 2h bits (4^h >= n, so fewer than 4 walks per index on average) with splitmix64 round functions
// keyed from `key`; an index mapped outside [0, n) is mapped again until it lands inside (cycle
// walking), which keeps it a bijection of [0, n).
class FeistelPermutation {
 public:
  FeistelPermutation() = default;
  FeistelPermutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
    while ((uint64_t{1} << (2 * half_)) < n) ++half_;
    mask_ = (uint64_t{1} << half_) - 1;
  }
  uint64_t operator()(uint64_t i) const {
    do i = round_trip(i);
    while (i >= n_);
    return i;
  }

 private:
  uint64_t round_trip(uint64_t x) const {
    uint64_t l = x >> half_, r = x & mask_;
    for (uint64_t k = 0; k < 4; ++k) {
      const uint64_t f = mix64(r ^ mix64(key_ + k * kGolden)) & mask_;
      const uint64_t t = l ^ f;
      l = r;
      r = t;
    }
    return (l << half_) | r;
  }
  uint64_t n_ = 1, key_ = 0, mask_ = 0;
  int half_ = 1;
};

// The windows of one epoch: shift plus visiting order (identity when neither is set).
struct EpochPlan {
  uint64_t epoch = UINT64_MAX;
  int64_t shift = 0;
  std::vector<uint64_t> order;  // Fisher-Yates, up to kMaxStoredOrder windows
  bool computed = false;        // more windows: `permute`
  FeistelPermutation permute;
  uint64_t window(uint64_t k) const { return computed ? permute(k) : order.empty() ? k : order[k]; }
};

}  // namespace

// One dataset of the loader (the only one, or one of a mixture) and where its windows lie.
struct Source {
  TokenDataset ds;
  bool masked = false;  // the split has a loss mask
  int64_t n_tokens = 0, n_shifts = 1, windows = 0;
  uint64_t seed = 0;
  double share = 1;  // of the windows drawn
  double upto = 1;   // a draw u in [0, 1) below this (and not below the previous source's) picks it
  EpochPlan plan;    // used only by assemble(), which never runs on two threads at once
};

struct DataLoader::Impl {
  std::vector<Source> src;  // read with pread: the prefetch task and the trainer may read at once
  Split split = Split::kTrain;
  bool masked = false;  // batches carry a mask: some source has one (the others' windows count all)
  int64_t batch = 0, seq = 0;
  int64_t rank = 0, world = 1;  // this rank's rows of a global batch of world * batch windows
  uint64_t seed = 0, mix_seed = 0;
  bool shuffle = true, prefetch = true;

  LoaderState state;  // where the next call to next() starts
  std::vector<uint8_t> window_mask;  // (T) one window's targets' mask entries; used only by assemble()

  // Prefetch: `ahead` (ending at `ahead_end`) is being built for `state` while `pending`.
  tbb::task_group tasks;
  bool pending = false;
  Batch ahead;
  LoaderState ahead_end;

  const EpochPlan& plan_for(Source& s, uint64_t epoch) {
    EpochPlan& plan = s.plan;
    if (plan.epoch == epoch) return plan;
    plan.epoch = epoch;
    plan.shift = 0;
    plan.order.clear();
    plan.computed = false;
    if (shuffle) {
      Rng rng(s.seed, epoch);
      plan.shift = static_cast<int64_t>(rng.below(static_cast<uint64_t>(s.n_shifts)));
      plan.computed = static_cast<uint64_t>(s.windows) > kMaxStoredOrder;
      if (plan.computed) {
        plan.permute = FeistelPermutation(static_cast<uint64_t>(s.windows), rng.next());
      } else {
        plan.order.resize(static_cast<size_t>(s.windows));
        for (size_t i = 0; i < plan.order.size(); ++i) plan.order[i] = i;
        for (size_t i = plan.order.size(); i > 1; --i) {
          std::swap(plan.order[i - 1], plan.order[rng.below(i)]);
        }
      }
    }
    return plan;
  }

  // The source of window number g of the sequence: a pure function of (seed, g).
  size_t pick(uint64_t g) const {
    if (src.size() == 1) return 0;
    const double u = static_cast<double>(mix64(mix_seed ^ mix64(g + kGolden)) >> 11) * 0x1.0p-53;
    for (size_t i = 0; i + 1 < src.size(); ++i)
      if (u < src[i].upto) return i;
    return src.size() - 1;
  }

  // This rank's (B, T+1) rows of the global batch starting at `st`; advances `st` past all of it.
  Batch assemble(LoaderState& st) {
    Batch out;
    out.tokens = torch::empty({batch, seq + 1}, torch::kInt64);
    int64_t* dst = out.tokens.data_ptr<int64_t>();
    float* mdst = nullptr;
    int64_t counted = 0;  // targets that count, over the global batch
    if (masked) {
      out.mask = torch::empty({batch, seq}, torch::kFloat32);
      mdst = out.mask.data_ptr<float>();
    }
    for (int64_t g = 0; g < world * batch; ++g) {
      const size_t i = pick(st.drawn);
      Source& s = src[i];
      uint64_t& epoch = i == 0 ? st.epoch : st.more[i - 1].epoch;
      uint64_t& cursor = i == 0 ? st.cursor : st.more[i - 1].cursor;
      const EpochPlan& p = plan_for(s, epoch);
      const uint64_t w = p.window(cursor);
      const int64_t start = p.shift + static_cast<int64_t>(w) * seq;
      BCD_CHECK(start >= 0 && start + seq + 1 <= s.n_tokens, "window {} of epoch {} of {}", w, epoch, s.ds.dir());
      const bool mine = g / batch == rank;
      if (mine) s.ds.read_tokens(split, start, seq + 1, dst + (g - rank * batch) * (seq + 1));
      if (masked) {
        const uint8_t* m = window_mask.data();
        if (s.masked)
          s.ds.read_mask(split, start + 1, seq, window_mask.data());
        else
          std::fill(window_mask.begin(), window_mask.end(), uint8_t{1});
        if (mine) std::copy(m, m + seq, mdst + (g - rank * batch) * seq);
        counted += std::count(m, m + seq, uint8_t{1});
      }
      if (++cursor == static_cast<uint64_t>(s.windows)) {
        ++epoch;
        cursor = 0;
      }
      if (src.size() > 1) ++st.drawn;
    }
    out.divisor = masked ? static_cast<double>(counted) / static_cast<double>(world) : static_cast<double>(batch * seq);
    return out;
  }

  void launch() {
    pending = true;
    const LoaderState from = state;
    tasks.run([this, from] {
      LoaderState st = from;
      ahead = assemble(st);
      ahead_end = st;
    });
  }

  void drop() {
    if (!pending) return;
    pending = false;
    try {
      tasks.wait();
    } catch (...) {
      // the batch is discarded; a persistent cause fails again in the next next()
    }
    ahead = Batch();
  }
};

DataLoader::DataLoader(const TokenDataset& ds, Split split, int64_t batch_size, int64_t seq_len,
                       uint64_t seed, bool shuffle, bool prefetch, int rank, int world_size)
    : DataLoader(std::vector<DataSource>{DataSource{ds, 1.0}}, split, batch_size, seq_len, seed, shuffle, prefetch,
                 rank, world_size) {}

DataLoader::DataLoader(std::vector<DataSource> sources, Split split, int64_t batch_size, int64_t seq_len,
                       uint64_t seed, bool shuffle, bool prefetch, int rank, int world_size)
    : impl_(std::make_unique<Impl>()) {
  if (batch_size < 1) user_error("data loader: batch_size is {}, expected >= 1", batch_size);
  BCD_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of {}", rank, world_size);
  if (seq_len < 1) user_error("data loader: seq_len is {}, expected >= 1", seq_len);
  BCD_CHECK(!sources.empty(), "a loader needs a dataset");
  double total = 0;
  for (const DataSource& d : sources) {
    if (!(d.weight > 0 && std::isfinite(d.weight)))
      user_error("data loader: dataset {} has weight {}, expected a positive number", d.ds.dir(), d.weight);
    total += d.weight;
  }
  if (!std::isfinite(total)) user_error("data loader: the datasets' weights sum to {}, expected a finite sum", total);
  Impl& m = *impl_;
  double upto = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const TokenDataset& ds = sources[i].ds;
    const int64_t n = ds.n_tokens(split);
    if (n < seq_len + 1) {
      user_error(
          "dataset {}: the {} split holds {} tokens, fewer than seq_len + 1 = {} needed for "
          "one window (use a smaller seq_len or more data)",
          ds.dir(), split_name(split), n, seq_len + 1);
    }
    Source s;
    s.ds = ds;
    s.masked = ds.masked();
    s.n_tokens = n;
    s.n_shifts = shuffle ? std::min(seq_len, n - seq_len) : 1;
    s.windows = (n - s.n_shifts) / seq_len;
    BCD_CHECK(s.windows >= 1, "n={} T={} S={}", n, seq_len, s.n_shifts);
    s.seed = i == 0 ? seed : mix64(seed ^ mix64(i * kGolden));
    s.share = sources[i].weight / total;
    upto += s.share;
    s.upto = i + 1 == sources.size() ? 1.0 : upto;
    m.masked |= s.masked;
    m.src.push_back(std::move(s));
  }
  m.split = split;
  if (m.masked) m.window_mask.resize(static_cast<size_t>(seq_len));
  m.batch = batch_size;
  m.seq = seq_len;
  m.seed = seed;
  m.mix_seed = mix64(seed ^ 0x6d69787475726573ULL);  // "mixtures"
  m.shuffle = shuffle;
  m.prefetch = prefetch;
  m.rank = rank;
  m.world = world_size;
  m.state.more.resize(m.src.size() - 1);
}

DataLoader::~DataLoader() {
  // a task_group must be waited on before it dies; a failed prefetch no longer matters here
  try {
    impl_->tasks.wait();
  } catch (...) {
  }
}

Batch DataLoader::next() {
  Impl& m = *impl_;
  Batch out;
  if (m.pending) {
    m.pending = false;
    m.tasks.wait();  // rethrows a failure of the prefetch
    out = std::move(m.ahead);
    m.ahead = Batch();
    m.state = m.ahead_end;
  } else {
    LoaderState st = m.state;
    out = m.assemble(st);
    m.state = st;
  }
  if (m.prefetch) m.launch();
  return out;
}

LoaderState DataLoader::state() const { return impl_->state; }

void DataLoader::restore(const LoaderState& s) {
  Impl& m = *impl_;
  if (s.more.size() + 1 != m.src.size()) {
    user_error(
        "loader state holds positions in {} dataset(s), this loader mixes {} (was it saved with another "
        "[data] path or paths?)",
        s.more.size() + 1, m.src.size());
  }
  for (size_t i = 0; i < m.src.size(); ++i) {
    const uint64_t epoch = i == 0 ? s.epoch : s.more[i - 1].epoch;
    const uint64_t cursor = i == 0 ? s.cursor : s.more[i - 1].cursor;
    if (cursor > static_cast<uint64_t>(m.src[i].windows)) {
      user_error(
          "loader state (epoch {}, cursor {}) is past the {} windows per epoch of this split{} "
          "(was it saved with a different dataset, seq_len or shuffle setting?)",
          epoch, cursor, m.src[i].windows, m.src.size() > 1 ? " of " + m.src[i].ds.dir() : std::string());
    }
  }
  m.drop();
  m.state = s;
  for (size_t i = 0; i < m.src.size(); ++i) {
    uint64_t& epoch = i == 0 ? m.state.epoch : m.state.more[i - 1].epoch;
    uint64_t& cursor = i == 0 ? m.state.cursor : m.state.more[i - 1].cursor;
    if (cursor == static_cast<uint64_t>(m.src[i].windows)) {  // the same point, normalized
      ++epoch;
      cursor = 0;
    }
  }
}

int64_t DataLoader::windows_per_epoch() const {
  const Impl& m = *impl_;
  double w = static_cast<double>(m.src[0].windows) / m.src[0].share;
  for (const Source& s : m.src) w = std::min(w, static_cast<double>(s.windows) / s.share);
  return std::max<int64_t>(1, static_cast<int64_t>(w));
}

}  // namespace bcd
