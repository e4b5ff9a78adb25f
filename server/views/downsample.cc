#include "server/views/downsample.h"

#include <cmath>
#include <limits>

namespace tensorkeep {

std::vector<EnvelopeBucket> MinMaxEnvelope(absl::Span<const SeriesPoint> points,
                                           size_t max_buckets) {
  std::vector<EnvelopeBucket> out;
  if (points.empty() || max_buckets == 0) return out;
  const size_t per = (points.size() + max_buckets - 1) / max_buckets;
  out.reserve((points.size() + per - 1) / per);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (size_t begin = 0; begin < points.size(); begin += per) {
    const size_t end = std::min(points.size(), begin + per);
    EnvelopeBucket b;
    b.first_step = points[begin].step;
    b.last_step = points[end - 1].step;
    b.count = static_cast<uint32_t>(end - begin);
    b.min = b.max = nan;
    double sum = 0;
    size_t finite_or_inf = 0;
    for (size_t i = begin; i < end; ++i) {
      const double v = points[i].value;
      if (std::isnan(v)) continue;
      if (finite_or_inf == 0 || v < b.min) {
        b.min = v;
        b.min_step = points[i].step;
      }
      if (finite_or_inf == 0 || v > b.max) {
        b.max = v;
        b.max_step = points[i].step;
      }
      sum += v;
      ++finite_or_inf;
    }
    b.mean = finite_or_inf == 0 ? nan : sum / static_cast<double>(finite_or_inf);
    if (finite_or_inf == 0) b.min_step = b.max_step = b.first_step;
    out.push_back(b);
  }
  return out;
}

}  // namespace tensorkeep
