#include "rules/value_math.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/dtype.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::vector<double>> ToDoubles(const client::Value& value) {
  if (!IsValidDType(value.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid dtype ", value.dtype));
  }
  DType dtype = static_cast<DType>(value.dtype);
  TK_RETURN_IF_ERROR(CheckValueSize(dtype, value.shape, value.data.size()));
  std::vector<double> out(value.data.size() / DTypeSize(dtype));
  ConvertToFloat64(dtype, value.data.data(), out.size(), out.data());
  return out;
}

bool AllClose(absl::Span<const double> a, absl::Span<const double> b, double rtol, double atol,
              bool equal_nan) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    double x = a[i], y = b[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (equal_nan && std::isnan(x) && std::isnan(y)) continue;
      return false;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x == y) continue;
      return false;
    }
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

double Percentile(std::vector<double>& values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  if (values.empty()) return std::nan("");
  q = std::clamp(q, 0.0, 100.0);
  double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, values.size() - 1);
  std::nth_element(values.begin(), values.begin() + lo, values.end());
  double vlo = values[lo];
  double vhi = vlo;
  if (hi != lo) vhi = *std::min_element(values.begin() + lo + 1, values.end());
  double frac = pos - static_cast<double>(lo);
  return vlo + (vhi - vlo) * frac;
}

double L2Distance(absl::Span<const double> a, absl::Span<const double> b) {
  double sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = a[i] - b[i];
    sum += d * d;
  }
  return std::sqrt(sum);
}

double L2Norm(absl::Span<const double> a) {
  double sum = 0;
  for (double x : a) sum += x * x;
  return std::sqrt(sum);
}

absl::StatusOr<std::vector<int64_t>> ClassIndices(const client::Value& value, bool argmax) {
  TK_ASSIGN_OR_RETURN(std::vector<double> v, ToDoubles(value));
  std::vector<int64_t> out;
  if (!argmax) {
    out.reserve(v.size());
    for (double x : v) out.push_back(static_cast<int64_t>(std::llround(x)));
    return out;
  }
  size_t width = value.shape.empty() ? 1 : static_cast<size_t>(value.shape.back());
  if (width == 0) return out;
  for (size_t row = 0; row + width <= v.size(); row += width) {
    size_t best = 0;
    for (size_t j = 1; j < width; ++j) {
      if (v[row + j] > v[row + best]) best = j;
    }
    out.push_back(static_cast<int64_t>(best));
  }
  return out;
}

}  // namespace rules
}  // namespace tensorkeep
