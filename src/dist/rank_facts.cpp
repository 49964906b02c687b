// What ranks say about their run, compared across ranks (ProcessGroup::agree), and how their
// differences are named.
#include "dist/rank_facts.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace bcd {

namespace {

// A value as a message shows it: on one line, and not a page long.
std::string shown(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else out += c;
  }
  constexpr size_t kMax = 160;
  if (out.size() > kMax) out = out.substr(0, kMax / 2 - 2) + "..." + out.substr(out.size() - (kMax / 2 - 1));
  return out;
}

}  // namespace

std::string fnv1a_hex(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + out;
}

std::string rank_differences(const std::vector<RankFacts>& facts_of, size_t max_keys) {
  std::vector<std::string> keys;  // in the order the ranks name them
  std::vector<std::map<std::string, std::string>> values(facts_of.size());
  for (size_t r = 0; r < facts_of.size(); ++r)
    for (const auto& [k, v] : facts_of[r]) {
      if (std::none_of(keys.begin(), keys.end(), [&](const std::string& x) { return x == k; })) keys.push_back(k);
      values[r][k] = v;
    }
  std::vector<std::string> clauses;
  for (const std::string& k : keys) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;  // value -> its ranks, by lowest rank
    for (size_t r = 0; r < values.size(); ++r) {
      const auto it = values[r].find(k);
      const std::string v = it == values[r].end() ? "(not given)" : it->second;
      auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == v; });
      if (g == groups.end()) groups.push_back({v, {static_cast<int>(r)}});
      else g->second.push_back(static_cast<int>(r));
    }
    if (groups.size() < 2) continue;
    std::string clause = k + ": ";
    for (size_t i = 0; i < groups.size(); ++i)
      clause += (i ? "; " : "") + shown(groups[i].first) + " on " + rank_ranges(groups[i].second);
    clauses.push_back(std::move(clause));
  }
  std::string out;
  for (size_t i = 0; i < clauses.size() && i < max_keys; ++i) out += (i ? " | " : "") + clauses[i];
  if (clauses.size() > max_keys) out += fmt::format(" | and {} more keys", clauses.size() - max_keys);
  return out;
}

}  // namespace bcd
