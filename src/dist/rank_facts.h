// What one rank says must be the same on every rank, and how differences are named: the
// vocabulary ProcessGroup::agree compares in and dist/run_identity.h describes a run in.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace bcd {

// ("key", value) pairs, e.g. ("train.lr", "0.002"), in a fixed order.
using RankFacts = std::vector<std::pair<std::string, std::string>>;

// FNV-1a (64 bits) of `bytes` in hex: the quick equality check of ranks' descriptions and of the
// small files they name.
std::string fnv1a_hex(const std::string& bytes);

// Ranks as a reader wants them: {1} -> "rank 1", {0, 2, 3, 5} -> "ranks 0, 2-3, 5".
std::string rank_ranges(std::vector<int> ranks);

// Where ranks' facts differ (facts_of[r] is rank r's): one clause per key that is not the same
// everywhere, "train.lr: 0.002 on ranks 0, 2-3; 0.5 on rank 1", joined by " | " (at most
// `max_keys`, then how many more); "" when every rank says the same.
std::string rank_differences(const std::vector<RankFacts>& facts_of, size_t max_keys = 8);

}  // namespace bcd
