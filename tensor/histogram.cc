#include "tensor/histogram.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace {

constexpr int kMaxBins = 1000000;

// The min and max of the finite values among x[0..n); (inf, -inf) if none.
std::pair<double, double> FiniteMinMax(const double* x, size_t n) {
  double min = std::numeric_limits<double>::infinity();
  double max = -min;
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) {
      min = std::min(min, x[i]);
      max = std::max(max, x[i]);
    }
  }
  return {min, max};
}

}  // namespace

absl::StatusOr<Histogram> ComputeHistogram(DType dtype, absl::Span<const char> data, int bins,
                                           std::optional<std::pair<double, double>> range) {
  TK_RETURN_IF_ERROR(ElementCount(dtype, data).status());
  if (bins < 1 || bins > kMaxBins) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram bins must be in [1, ", kMaxBins, "], got ", bins));
  }

  double lo, hi;
  if (range.has_value()) {
    std::tie(lo, hi) = *range;
    if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi)) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram range must be finite with lo < hi, got [", lo, ", ", hi, "]"));
    }
  } else {
    // [min, max] of the finite values, as numpy's a.min(), a.max() would be
    // without the NaNs and infinities (with which numpy gives up).
    double min = std::numeric_limits<double>::infinity();
    double max = -min;
    ForEachAsFloat64(dtype, data, [&](const double* x, size_t count) {
      const auto [block_min, block_max] = FiniteMinMax(x, count);
      min = std::min(min, block_min);
      max = std::max(max, block_max);
    });
    if (min > max) {  // no finite value
      lo = 0.0;
      hi = 1.0;
    } else if (min == max) {
      lo = min - 0.5;
      hi = max + 0.5;
      if (lo == hi) {  // 0.5 is below the spacing of doubles near min
        lo = std::nextafter(min, -std::numeric_limits<double>::infinity());
        hi = std::nextafter(max, std::numeric_limits<double>::infinity());
      }
    } else {
      lo = min;
      hi = max;
    }
  }
  const double width = hi - lo;
  if (!std::isfinite(width)) {
    return absl::InvalidArgumentError(absl::StrCat("histogram range [", lo, ", ", hi,
                                                   "] is too wide: its width overflows float64"));
  }

  Histogram histogram;
  // np.linspace(lo, hi, bins + 1): i * step + lo, with the last edge exactly hi.
  histogram.edges.resize(static_cast<size_t>(bins) + 1);
  const double step = width / bins;
  for (int i = 0; i < bins; ++i) {
    histogram.edges[i] = step == 0.0 ? static_cast<double>(i) / bins * width + lo : i * step + lo;
  }
  histogram.edges[bins] = hi;
  histogram.counts.assign(static_cast<size_t>(bins), 0);

  // numpy's bin search: scale, then correct by one bin against the edges,
  // which the scaling may miss by an ulp; the result is the bin whose edges
  // hold the value, the last one including hi.
  const double* edges = histogram.edges.data();
  uint64_t* counts = histogram.counts.data();
  uint64_t nan_count = 0, outside_count = 0;
  ForEachAsFloat64(dtype, data, [&](const double* x, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      const double v = x[i];
      if (!(v >= lo && v <= hi)) {  // also true for NaN
        if (std::isnan(v)) {
          ++nan_count;
        } else {
          ++outside_count;
        }
        continue;
      }
      const double scaled = (v - lo) / width * bins;
      int index = scaled < bins ? static_cast<int>(scaled) : bins - 1;
      if (v < edges[index]) {
        --index;
      } else if (index != bins - 1 && v >= edges[index + 1]) {
        ++index;
      }
      ++counts[index];
    }
  });
  histogram.nan_count = nan_count;
  histogram.outside_count = outside_count;
  return histogram;
}

}  // namespace tensorkeep
