// Equal-width histograms of a tensor's values, as numpy.histogram computes
// them.
//
// All functions here are pure and thread-safe.
#ifndef TENSORKEEP_TENSOR_HISTOGRAM_H_
#define TENSORKEEP_TENSOR_HISTOGRAM_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/dtype.h"

namespace tensorkeep {

// A histogram: counts[i] is the number of values in [edges[i], edges[i+1]),
// except that the last bin also holds values equal to edges.back().
// edges.size() == counts.size() + 1. Values outside [edges.front(),
// edges.back()] (including infinities) are counted in outside_count and NaNs
// in nan_count, so that the four counts add up to the number of elements.
struct Histogram {
  std::vector<double> edges;
  std::vector<uint64_t> counts;
  uint64_t nan_count = 0;
  uint64_t outside_count = 0;
};

// The histogram of the flattened tensor whose elements of type `dtype` are
// `data` (little-endian, any alignment), with numpy.histogram's semantics on
// the array converted to float64 (bool counts as 0/1):
//   - `bins` bins of equal width, with edges = np.linspace(lo, hi, bins + 1);
//   - `range` = [lo, hi] if given; otherwise [min, max] of the finite values,
//     widened to [min - 0.5, max + 0.5] if min == max (to the neighbouring
//     float64 values if |min| is so large that 0.5 is lost), and [0, 1] if
//     there is no finite value;
//   - a value's bin is found as numpy does (by scaling, then corrected against
//     the edges), and the last bin includes its right edge.
// Unlike numpy, NaNs and infinities never make the call fail: NaNs are counted
// in nan_count, infinities in outside_count.
//
// Returns InvalidArgument if `dtype` is invalid, if data.size() is not a
// multiple of DTypeSize(dtype), if `bins` is not in [1, 1000000], if a given
// range is not finite with lo < hi, or if the range's width overflows float64.
absl::StatusOr<Histogram> ComputeHistogram(DType dtype, absl::Span<const char> data, int bins,
                                           std::optional<std::pair<double, double>> range);

}  // namespace tensorkeep

#endif  // TENSORKEEP_TENSOR_HISTOGRAM_H_
