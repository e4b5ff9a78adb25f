#include "server/views/step_distribution.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "base/status_macros.h"
#include "tensor/histogram.h"

namespace tensorkeep {

namespace {

// The distribution of `n` values of a floating type in two passes over them
// as they are (no conversion to float64 first): the finite extremes and the
// NaN and infinity counts, then the fine histogram over [min, max].
// The range of the fine histogram for values whose finite extremes are
// [min, max] (a single value gets a range around it, as tensor/histogram.h),
// with d's min and max set.
void SetRange(double min, double max, StepDistribution* d, double* lo, double* hi) {
  d->min = min;
  d->max = max;
  *lo = min;
  *hi = max;
  if (min == max) {
    *lo = min - 0.5;
    *hi = max + 0.5;
    if (*lo == *hi) {
      *lo = std::nextafter(min, -std::numeric_limits<double>::infinity());
      *hi = std::nextafter(max, std::numeric_limits<double>::infinity());
    }
  }
}

// d's edges and counts from four interleaved count arrays of kFineBins.
void SetBins(double lo, double hi, const std::vector<uint32_t>& sub, StepDistribution* d) {
  constexpr int kBins = StepDistribution::kFineBins;
  const double step = (hi - lo) / kBins;
  d->edges.resize(kBins + 1);
  for (int b = 0; b < kBins; ++b) d->edges[b] = lo + b * step;
  d->edges[kBins] = hi;
  d->counts.assign(kBins, 0.0);
  for (int b = 0; b < kBins; ++b) {
    d->counts[b] =
        static_cast<double>(sub[b]) + sub[kBins + b] + sub[2 * kBins + b] + sub[3 * kBins + b];
  }
}

#ifdef __SSE2__
// float32 with SSE2 (every x86-64), 4 values at a time: _mm_min_ps(v, m) is
// `v < m ? v : m`, which skips NaN as the scalar pass does; the bins of 4
// values are computed together in float (an ulp off numpy's at an edge, as
// below), then counted one by one.
StepDistribution FineDistributionSse(const float* x, size_t n) {
  StepDistribution d;
  const __m128 inf = _mm_set1_ps(std::numeric_limits<float>::infinity());
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  __m128 min = inf, max = _mm_sub_ps(_mm_setzero_ps(), inf);
  __m128i nan = _mm_setzero_si128(), infs = _mm_setzero_si128();
  uint64_t nan_count = 0, inf_count = 0;
  size_t i = 0;
  const auto drain = [&] {  // int32 lanes -> totals, before they can overflow
    alignas(16) int32_t a[4], b[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(a), nan);
    _mm_store_si128(reinterpret_cast<__m128i*>(b), infs);
    for (int k = 0; k < 4; ++k) {
      nan_count -= static_cast<int64_t>(a[k]);  // lanes count down (-1 a match)
      inf_count -= static_cast<int64_t>(b[k]);
    }
    nan = infs = _mm_setzero_si128();
  };
  for (size_t block = 0; i + 4 <= n; i += 4, ++block) {
    const __m128 v = _mm_loadu_ps(x + i);
    min = _mm_min_ps(v, min);
    max = _mm_max_ps(v, max);
    nan = _mm_add_epi32(nan, _mm_castps_si128(_mm_cmpunord_ps(v, v)));
    infs = _mm_add_epi32(infs, _mm_castps_si128(_mm_cmpeq_ps(_mm_and_ps(v, abs_mask), inf)));
    if ((block & 0xffffff) == 0xffffff) drain();
  }
  drain();
  alignas(16) float mins[4], maxs[4];
  _mm_store_ps(mins, min);
  _mm_store_ps(maxs, max);
  float lo_f = std::numeric_limits<float>::infinity(), hi_f = -lo_f;
  for (int k = 0; k < 4; ++k) {
    lo_f = mins[k] < lo_f ? mins[k] : lo_f;
    hi_f = maxs[k] > hi_f ? maxs[k] : hi_f;
  }
  for (; i < n; ++i) {
    const float v = x[i];
    lo_f = v < lo_f ? v : lo_f;
    hi_f = v > hi_f ? v : hi_f;
    nan_count += v != v;
    inf_count += std::fabs(v) == std::numeric_limits<float>::infinity();
  }
  if (inf_count > 0) {  // the extremes above may be infinities: the finite ones
    lo_f = std::numeric_limits<float>::infinity();
    hi_f = -lo_f;
    for (size_t j = 0; j < n; ++j) {
      if (std::isfinite(x[j])) {
        lo_f = std::min(lo_f, x[j]);
        hi_f = std::max(hi_f, x[j]);
      }
    }
  }
  d.nan_count = nan_count;
  d.inf_count = inf_count;
  d.count = n - nan_count - inf_count;
  if (d.count == 0) return d;
  constexpr int kBins = StepDistribution::kFineBins;
  double lo, hi;
  SetRange(lo_f, hi_f, &d, &lo, &hi);
  std::vector<uint32_t> sub(4 * kBins, 0);  // (n < 2^32: every count fits)
  uint32_t* c = sub.data();
  i = 0;
  if (nan_count + inf_count == 0 && lo_f < hi_f) {
    const __m128 lo4 = _mm_set1_ps(lo_f);
    const __m128 scale4 = _mm_set1_ps(static_cast<float>(kBins / (hi - lo)));
    const __m128 last4 = _mm_set1_ps(static_cast<float>(kBins - 1));
    alignas(16) int32_t idx[4];
    for (; i + 4 <= n; i += 4) {
      const __m128 s = _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(x + i), lo4), scale4);
      _mm_store_si128(reinterpret_cast<__m128i*>(idx), _mm_cvttps_epi32(_mm_min_ps(s, last4)));
      ++c[idx[0]];
      ++c[kBins + idx[1]];
      ++c[2 * kBins + idx[2]];
      ++c[3 * kBins + idx[3]];
    }
  }
  const double scale = kBins / (hi - lo);
  for (; i < n; ++i) {
    if (!std::isfinite(x[i])) continue;
    const double s = (static_cast<double>(x[i]) - lo) * scale;
    ++c[s < kBins - 1 ? static_cast<int>(s) : kBins - 1];
  }
  SetBins(lo, hi, sub, &d);
  return d;
}
#endif

template <typename T>
StepDistribution FineDistribution(const T* x, size_t n) {
  StepDistribution d;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  // Pass 1, branch-free (the compiler vectorizes it): `v < min ? v : min`
  // skips NaN (a comparison with NaN is false); infinities are counted, and
  // only when there are some is the finite min and max searched again.
  T min = kInf, max = -kInf;
  uint64_t nan = 0, inf = 0;
  for (size_t i = 0; i < n; ++i) {
    const T v = x[i];
    min = v < min ? v : min;
    max = v > max ? v : max;
    nan += v != v;
    inf += std::fabs(v) == kInf;
  }
  if (inf > 0) {
    min = kInf;
    max = -kInf;
    for (size_t i = 0; i < n; ++i) {
      const T v = x[i];
      if (std::isfinite(v)) {
        min = v < min ? v : min;
        max = v > max ? v : max;
      }
    }
  }
  d.nan_count = nan;
  d.inf_count = inf;
  d.count = n - nan - inf;
  if (d.count == 0) return d;
  constexpr int kBins = StepDistribution::kFineBins;
  double lo, hi;
  SetRange(min, max, &d, &lo, &hi);
  // Pass 2: the fine histogram, with four interleaved count arrays (an
  // increment does not wait for the one before). The bin of a value is its
  // scaled offset, which may differ by an ulp from numpy's at an edge:
  // within the fine bin the percentiles already allow.
  const double scale = kBins / (hi - lo);
  std::vector<uint32_t> sub(4 * kBins, 0);  // (n < 2^32: every count fits)
  uint32_t* c = sub.data();
  const auto bin = [lo, scale](T v) {
    const double s = (static_cast<double>(v) - lo) * scale;  // >= 0 for finite v
    return s < kBins - 1 ? static_cast<int>(s) : kBins - 1;
  };
  size_t i = 0;
  if (nan + inf == 0) {
    for (; i + 4 <= n; i += 4) {
      ++c[bin(x[i])];
      ++c[kBins + bin(x[i + 1])];
      ++c[2 * kBins + bin(x[i + 2])];
      ++c[3 * kBins + bin(x[i + 3])];
    }
  }
  for (; i < n; ++i) {
    if (std::isfinite(x[i])) ++c[bin(x[i])];
  }
  SetBins(lo, hi, sub, &d);
  return d;
}

}  // namespace

absl::StatusOr<StepDistribution> ComputeStepDistribution(DType dtype, absl::Span<const char> data) {
  // float32 and float64, what training saves, the fast way; the others
  // through the float64 histogram.
  if ((dtype == DType::kFloat32 || dtype == DType::kFloat64) &&
      data.size() / DTypeSize(dtype) < (uint64_t{1} << 32)) {
    TK_RETURN_IF_ERROR(ElementCount(dtype, data).status());
    if (dtype == DType::kFloat32) {
      std::vector<float> aligned;  // (a value's bytes need not be aligned)
      const float* x = reinterpret_cast<const float*>(data.data());
      if (reinterpret_cast<uintptr_t>(x) % alignof(float) != 0) {
        aligned.resize(data.size() / sizeof(float));
        std::memcpy(aligned.data(), data.data(), aligned.size() * sizeof(float));
        x = aligned.data();
      }
#ifdef __SSE2__
      return FineDistributionSse(x, data.size() / sizeof(float));
#else
      return FineDistribution(x, data.size() / sizeof(float));
#endif
    }
    std::vector<double> aligned;
    const double* x = reinterpret_cast<const double*>(data.data());
    if (reinterpret_cast<uintptr_t>(x) % alignof(double) != 0) {
      aligned.resize(data.size() / sizeof(double));
      std::memcpy(aligned.data(), data.data(), aligned.size() * sizeof(double));
      x = aligned.data();
    }
    return FineDistribution(x, data.size() / sizeof(double));
  }
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
