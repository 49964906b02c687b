// Helpers shared by the benchmark programs: medians and settings from the environment.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace bcd::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A number from the environment, or `dflt` when unset or empty.
inline int env_int(const char* name, int dflt) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : dflt;
}
inline double env_double(const char* name, double dflt) {
  const char* s = std::getenv(name);
  return s && *s ? std::atof(s) : dflt;
}

}  // namespace bcd::bench
