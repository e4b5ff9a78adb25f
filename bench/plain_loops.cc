#include "bench/plain_loops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tensorkeep {
namespace bench {

double PlainLoopMean(absl::Span<const float> v) {
  double sum = 0;
  for (float f : v) sum += f;
  return sum / static_cast<double>(v.size());
}

double PlainLoopMin(absl::Span<const float> v) {
  double min = std::numeric_limits<double>::infinity();
  for (float f : v) min = std::min<double>(min, f);
  return min;
}

double PlainLoopL2(absl::Span<const float> v) {
  double sq = 0;
  for (float f : v) sq += static_cast<double>(f) * f;
  return std::sqrt(sq);
}

std::vector<double> PlainLoopMeanStd(absl::Span<const float> v) {
  const double shift = v.empty() ? 0 : v[0];
  double sum = 0, shifted = 0, shifted_sq = 0;
  for (float f : v) {
    sum += f;
    const double d = f - shift;
    shifted += d;
    shifted_sq += d * d;
  }
  const double n = static_cast<double>(v.size());
  return {sum / n, std::sqrt((shifted_sq - shifted * shifted / n) / n)};
}

std::vector<double> PlainLoopAll(absl::Span<const float> v) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double shift = v.empty() ? 0 : v[0];
  const double abs_shift = std::fabs(shift);
  double min = kInf, max = -kInf, abs_min = kInf, abs_max = -kInf;
  double sum = 0, abs_sum = 0, sum_sq = 0, prod = 1;
  double shifted = 0, shifted_sq = 0, abs_shifted = 0, abs_shifted_sq = 0;
  for (float f : v) {
    const double x = f;
    const double a = std::fabs(x);
    min = std::min(min, x);
    max = std::max(max, x);
    abs_min = std::min(abs_min, a);
    abs_max = std::max(abs_max, a);
    sum += x;
    abs_sum += a;
    sum_sq += x * x;
    prod *= x;
    const double d = x - shift;
    shifted += d;
    shifted_sq += d * d;
    const double ad = a - abs_shift;
    abs_shifted += ad;
    abs_shifted_sq += ad * ad;
  }
  const double n = static_cast<double>(v.size());
  const double var = (shifted_sq - shifted * shifted / n) / n;
  const double abs_var = (abs_shifted_sq - abs_shifted * abs_shifted / n) / n;
  return {min,     max,     sum / n,     std::sqrt(var),     var,     sum,
          prod,    abs_sum, std::sqrt(sum_sq),
          abs_min, abs_max, abs_sum / n, std::sqrt(abs_var), abs_var, abs_sum,
          std::fabs(prod), abs_sum, std::sqrt(sum_sq)};
}

}  // namespace bench
}  // namespace tensorkeep
