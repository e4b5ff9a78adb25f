#include "server/views/step_distribution.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/histogram.h"

namespace tensorkeep {

absl::StatusOr<StepDistribution> ComputeStepDistribution(DType dtype, absl::Span<const char> data) {
  auto h = ComputeHistogram(dtype, data, StepDistribution::kFineBins, std::nullopt);
  if (!h.ok()) return h.status();
  StepDistribution d;
  d.nan_count = h->nan_count;
  d.inf_count = h->outside_count;  // without a range only infinities are outside
  for (uint64_t c : h->counts) d.count += c;
  if (d.count == 0) return d;
  // The finite min and max: ComputeHistogram spans [min, max] exactly unless
  // all values are equal (then it widens the range around the value).
  size_t first = 0, last = h->counts.size() - 1;
  while (h->counts[first] == 0) ++first;
  while (h->counts[last] == 0) --last;
  if (first == last && h->counts.size() > 1 && first != 0 && last != h->counts.size() - 1) {
    // One value, widened: the middle of the range is the value.
    d.min = d.max = (h->edges.front() + h->edges.back()) / 2;
  } else {
    d.min = h->edges.front();
    d.max = h->edges.back();
  }
  d.edges = std::move(h->edges);
  d.counts.assign(h->counts.begin(), h->counts.end());
  return d;
}

StepDistribution MergeStepDistributions(absl::Span<const StepDistribution* const> parts) {
  StepDistribution out;
  std::vector<double> edges, points;
  bool any = false;
  for (const StepDistribution* d : parts) {
    if (d == nullptr) continue;
    out.nan_count += d->nan_count;
    out.inf_count += d->inf_count;
    if (d->count == 0) continue;
    out.count += d->count;
    out.min = any ? std::min(out.min, d->min) : d->min;
    out.max = any ? std::max(out.max, d->max) : d->max;
    any = true;
    if (d->min == d->max) {
      points.push_back(d->min);
    } else {
      edges.insert(edges.end(), d->edges.begin(), d->edges.end());
    }
  }
  if (!any) return out;
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  // A part of one value v gets a zero-width bin [v, v]: v twice in the edges.
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  for (double v : points) {
    const bool present = std::binary_search(edges.begin(), edges.end(), v);
    edges.insert(std::upper_bound(edges.begin(), edges.end(), v), present ? 1 : 2, v);
  }
  if (edges.size() < 2) edges.assign({out.min, out.max});  // defensive: one point
  out.counts.assign(edges.size() - 1, 0.0);
  for (const StepDistribution* d : parts) {
    if (d == nullptr || d->count == 0) continue;
    if (d->min == d->max) {
      size_t j = std::lower_bound(edges.begin(), edges.end(), d->min) - edges.begin();
      while (j + 1 < edges.size() && !(edges[j] == d->min && edges[j + 1] == d->min)) ++j;
      out.counts[std::min(j, out.counts.size() - 1)] += static_cast<double>(d->count);
      continue;
    }
    for (size_t i = 0; i + 1 < d->edges.size(); ++i) {
      const double c = d->counts[i];
      const double a = d->edges[i], b = d->edges[i + 1];
      if (c == 0 || !(b > a)) continue;
      for (size_t j = std::lower_bound(edges.begin(), edges.end(), a) - edges.begin();
           j + 1 < edges.size() && edges[j] < b; ++j) {
        const double overlap = std::min(b, edges[j + 1]) - std::max(a, edges[j]);
        if (overlap > 0) out.counts[j] += c * overlap / (b - a);
      }
    }
  }
  out.edges = std::move(edges);
  return out;
}

double Percentile(const StepDistribution& d, double p) {
  if (d.count == 0) return std::numeric_limits<double>::quiet_NaN();
  if (p <= 0) return d.min;
  if (p >= 100) return d.max;
  // numpy's linear percentile ranks values 0..n-1: the target rank.
  const double rank = p / 100.0 * static_cast<double>(d.count - 1);
  double before = 0;
  for (size_t i = 0; i < d.counts.size(); ++i) {
    const double c = d.counts[i];
    if (c == 0) continue;
    if (rank < before + c) {
      // The bin's values spread evenly: the k-th of c sits at (k + 0.5) / c.
      const double f = std::clamp((rank - before + 0.5) / c, 0.0, 1.0);
      const double v = d.edges[i] + f * (d.edges[i + 1] - d.edges[i]);
      return std::clamp(v, d.min, d.max);
    }
    before += c;
  }
  return d.max;
}

std::vector<double> Rebin(const StepDistribution& d, absl::Span<const double> edges) {
  std::vector<double> out(edges.size() > 1 ? edges.size() - 1 : 0, 0.0);
  if (out.empty() || d.count == 0) return out;
  const double lo = edges.front(), hi = edges.back();
  auto bin_of = [&](double x) {
    size_t i = std::upper_bound(edges.begin(), edges.end(), x) - edges.begin();
    return i == 0 ? size_t{0} : std::min(i - 1, out.size() - 1);
  };
  for (size_t i = 0; i < d.counts.size(); ++i) {
    const double c = d.counts[i];
    if (c == 0) continue;
    double a = d.edges[i], b = d.edges[i + 1];
    if (d.min == d.max) a = b = d.min;  // a single value
    if (b <= lo || a >= hi || a == b) {
      out[bin_of(std::clamp((a + b) / 2, lo, hi))] += c;
      continue;
    }
    // Spread c over [a, b] ∩ the edges, in proportion to the overlap; what
    // lies beyond the edges goes to the end bins.
    const double width = b - a;
    if (a < lo) out.front() += c * (lo - a) / width;
    if (b > hi) out.back() += c * (b - hi) / width;
    for (size_t j = bin_of(std::max(a, lo)); j < out.size() && edges[j] < b; ++j) {
      const double overlap = std::min(b, edges[j + 1]) - std::max(a, edges[j]);
      if (overlap > 0) out[j] += c * overlap / width;
    }
  }
  return out;
}

}  // namespace tensorkeep
