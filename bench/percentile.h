// Order statistics of a bench's samples: the nearest-rank percentile and the
// median. One definition for every figure tensorkeep-bench and its peers
// print (each file once kept its own, and they had drifted: one indexed at
// q * n, the others at the nearest rank).
//
// Thread safety: pure functions.
#ifndef TENSORKEEP_BENCH_PERCENTILE_H_
#define TENSORKEEP_BENCH_PERCENTILE_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace tensorkeep {
namespace bench {

// The nearest-rank percentile q (0..1] of `v`: the smallest sample with at
// least q of the samples at or below it. NAN for no samples.
template <typename T>
double Percentile(std::vector<T> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return static_cast<double>(v[rank - 1]);
}

// The median: the middle sample, or the mean of the two middle ones. NAN for
// no samples.
template <typename T>
double Median(std::vector<T> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? static_cast<double>(v[n / 2])
                    : (static_cast<double>(v[n / 2 - 1]) + static_cast<double>(v[n / 2])) / 2;
}

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_PERCENTILE_H_
