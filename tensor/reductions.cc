#include "tensor/reductions.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/errors.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr std::pair<ReductionKind, std::string_view> kReductionNames[] = {
    {ReductionKind::kMin, "min"},
    {ReductionKind::kMax, "max"},
    {ReductionKind::kMean, "mean"},
    {ReductionKind::kStd, "std"},
    {ReductionKind::kVariance, "variance"},
    {ReductionKind::kSum, "sum"},
    {ReductionKind::kProd, "prod"},
    {ReductionKind::kL1, "l1"},
    {ReductionKind::kL2, "l2"}};


// The accumulators a kernel may compute, as bits of its mask. Every spec needs
// one group; a call computes the union of its specs' groups.
enum Group : unsigned {
  kMinMax = 1u << 0,      // min x, max x, and whether some x is NaN
  kAbsMinMax = 1u << 1,   // min |x|, max |x|, and whether some x is NaN
  kSum = 1u << 2,         // sum x
  kAbsSum = 1u << 3,      // sum |x|
  kSumSq = 1u << 4,       // sum x^2
  kMoments = 1u << 5,     // sum (x - shift), sum (x - shift)^2
  kAbsMoments = 1u << 6,  // sum (|x| - abs_shift), sum (|x| - abs_shift)^2
  kProd = 1u << 7,        // prod x, in element order
};
constexpr unsigned kGroupCount = 8;

unsigned GroupOf(const ReductionSpec& spec) {
  switch (spec.kind) {
    case ReductionKind::kMin:
    case ReductionKind::kMax:
      return spec.abs ? kAbsMinMax : kMinMax;
    case ReductionKind::kMean:
    case ReductionKind::kSum:
      return spec.abs ? kAbsSum : kSum;
    case ReductionKind::kStd:
    case ReductionKind::kVariance:
      return spec.abs ? kAbsMoments : kMoments;
    case ReductionKind::kProd:
      return kProd;  // prod |x| == |prod x| exactly: IEEE rounding is symmetric
    case ReductionKind::kL1:
      return kAbsSum;
    case ReductionKind::kL2:
      return kSumSq;
  }
  return 0;
}

// A sum of block totals with Neumaier's compensation, so that the error does
// not grow with the number of blocks.
class CompensatedSum {
 public:
  void Add(double value) {
    const double t = sum_ + value;
    if (std::fabs(sum_) >= std::fabs(value)) {
      compensation_ += (sum_ - t) + value;
    } else {
      compensation_ += (value - t) + sum_;
    }
    sum_ = t;
  }
  // Once the sum is infinite or NaN the compensation is meaningless (it may be
  // NaN itself), and the sum is the answer.
  double Total() const { return std::isfinite(sum_) ? sum_ + compensation_ : sum_; }

 private:
  double sum_ = 0.0;
  double compensation_ = 0.0;
};

// The accumulators of a whole call, updated after each block.
struct Totals {
  double min = kInf;
  double max = -kInf;
  double abs_min = kInf;
  double abs_max = -kInf;
  bool saw_nan = false;
  CompensatedSum sum;
  CompensatedSum abs_sum;
  CompensatedSum sum_sq;
  CompensatedSum shifted;
  CompensatedSum shifted_sq;
  CompensatedSum abs_shifted;
  CompensatedSum abs_shifted_sq;
  double prod = 1.0;
};

// The values subtracted from x and |x| before the moments are accumulated;
// close to the means, so that the sums of squares do not cancel.
struct Shifts {
  double value = 0.0;
  double abs = 0.0;
};

// Two float64 lanes as one SSE2 register (a GCC/Clang vector extension). The
// compilers do not vectorise the IEEE min/max pattern of scalar code, so the
// kernel spells its SIMD out with this type; on it, `a < b ? a : b` is one
// minpd.
typedef double Vec2 __attribute__((vector_size(16)));
typedef int64_t Mask2 __attribute__((vector_size(16)));

template <typename T>
T Fill(double value);
template <>
double Fill<double>(double value) {
  return value;
}
template <>
Vec2 Fill<Vec2>(double value) {
  return Vec2{value, value};
}

double Abs(double v) { return std::fabs(v); }
Vec2 Abs(Vec2 v) {
  constexpr int64_t kNoSign = std::numeric_limits<int64_t>::max();
  return reinterpret_cast<Vec2>(reinterpret_cast<Mask2>(v) & Mask2{kNoSign, kNoSign});
}

// The accumulators of the groups of kMask over some of the elements, as
// scalars (T = double) or as two lanes (T = Vec2). The others are never
// touched and get optimised away.
template <unsigned kMask, typename T>
struct Accumulators {
  static constexpr bool kMinMaxOn = (kMask & kMinMax) != 0;
  static constexpr bool kAbsMinMaxOn = (kMask & kAbsMinMax) != 0;
  static constexpr bool kProbeOn = kMinMaxOn || kAbsMinMaxOn;

  // Adds element(s) v. The loop this is called from must have no branch, so
  // neither has this: a NaN never replaces a min or max (the comparisons are
  // false) and is noticed instead through `probe`, which sums v - v (0, or NaN
  // for NaNs and infinities).
  void Add(T v, T shift, T abs_shift) {
    const T a = Abs(v);
    if constexpr (kMinMaxOn) {
      min = v < min ? v : min;
      max = v > max ? v : max;
    }
    if constexpr (kAbsMinMaxOn) {
      abs_min = a < abs_min ? a : abs_min;
      abs_max = a > abs_max ? a : abs_max;
    }
    if constexpr (kProbeOn) probe += v - v;
    if constexpr ((kMask & kSum) != 0) sum += v;
    if constexpr ((kMask & kAbsSum) != 0) abs_sum += a;
    if constexpr ((kMask & kSumSq) != 0) sum_sq += v * v;
    if constexpr ((kMask & kMoments) != 0) {
      const T d = v - shift;
      shifted += d;
      shifted_sq += d * d;
    }
    if constexpr ((kMask & kAbsMoments) != 0) {
      const T d = a - abs_shift;
      abs_shifted += d;
      abs_shifted_sq += d * d;
    }
  }

  T min = Fill<T>(kInf);
  T max = Fill<T>(-kInf);
  T abs_min = Fill<T>(kInf);
  T abs_max = Fill<T>(-kInf);
  T probe = Fill<T>(0.0);
  T sum = Fill<T>(0.0);
  T abs_sum = Fill<T>(0.0);
  T sum_sq = Fill<T>(0.0);
  T shifted = Fill<T>(0.0);
  T shifted_sq = Fill<T>(0.0);
  T abs_shifted = Fill<T>(0.0);
  T abs_shifted_sq = Fill<T>(0.0);
};

// The sum of field `member` over the vector accumulators acc[0..V), added
// pairwise, and the scalar ones `tail`.
template <typename Acc, typename TailAcc, int V>
double SumOf(Vec2 Acc::*member, double TailAcc::*tail_member, const Acc (&acc)[V],
             const TailAcc& tail) {
  Vec2 lanes[V];
  for (int k = 0; k < V; ++k) lanes[k] = acc[k].*member;
  for (int width = V / 2; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  return (lanes[0][0] + lanes[0][1]) + tail.*tail_member;
}

// Folds block `x[0..n)` into `totals`, computing only the groups of kMask.
//
// Each accumulator is split into 2*V independent lanes (V vectors of two,
// element i going to lane i % 2V), so that the loop has no long dependency
// chain. Elements after the last full group of 2V go to scalar accumulators.
// Only a block whose NaN probe is NaN is scanned again for NaNs. prod is a
// single chain in element order, as numpy's.
template <unsigned kMask>
void ReduceBlock(const double* x, size_t n, const Shifts& shifts, Totals* totals) {
  using VecAcc = Accumulators<kMask, Vec2>;
  using TailAcc = Accumulators<kMask, double>;
  constexpr bool kProdOn = (kMask & kProd) != 0;
  // Vectors per accumulator (4 lanes): enough to hide addpd's latency. Fixed,
  // rather than chosen by how many accumulators there are, so that a result
  // has the same bits whatever else is computed with it. (With all groups on,
  // some accumulators spill to the stack; the loop is still well ahead of a
  // scalar one, see bench/tensor_benchmark.cc.)
  constexpr int V = 2;

  VecAcc acc[V];
  TailAcc tail;
  double prod = totals->prod;
  const Vec2 shift = Fill<Vec2>(shifts.value);
  const Vec2 abs_shift = Fill<Vec2>(shifts.abs);

  size_t i = 0;
  for (; i + 2 * V <= n; i += 2 * V) {
    // Unrolled, so that the accumulators are registers rather than memory.
#pragma GCC unroll 4
    for (int k = 0; k < V; ++k) {
      Vec2 v;
      std::memcpy(&v, x + i + 2 * k, sizeof(v));
      acc[k].Add(v, shift, abs_shift);
    }
    if constexpr (kProdOn) {
#pragma GCC unroll 8
      for (int j = 0; j < 2 * V; ++j) prod *= x[i + j];
    }
  }
  for (; i < n; ++i) {
    tail.Add(x[i], shifts.value, shifts.abs);
    if constexpr (kProdOn) prod *= x[i];
  }

  if constexpr (VecAcc::kMinMaxOn) {
    double min = tail.min, max = tail.max;
    for (int k = 0; k < V; ++k) {
      min = std::min({min, acc[k].min[0], acc[k].min[1]});
      max = std::max({max, acc[k].max[0], acc[k].max[1]});
    }
    totals->min = std::min(totals->min, min);
    totals->max = std::max(totals->max, max);
  }
  if constexpr (VecAcc::kAbsMinMaxOn) {
    double min = tail.abs_min, max = tail.abs_max;
    for (int k = 0; k < V; ++k) {
      min = std::min({min, acc[k].abs_min[0], acc[k].abs_min[1]});
      max = std::max({max, acc[k].abs_max[0], acc[k].abs_max[1]});
    }
    totals->abs_min = std::min(totals->abs_min, min);
    totals->abs_max = std::max(totals->abs_max, max);
  }
  if constexpr (VecAcc::kProbeOn) {
    if (!totals->saw_nan && std::isnan(SumOf(&VecAcc::probe, &TailAcc::probe, acc, tail))) {
      totals->saw_nan = std::any_of(x, x + n, [](double v) { return std::isnan(v); });
    }
  }
  if constexpr ((kMask & kSum) != 0) {
    totals->sum.Add(SumOf(&VecAcc::sum, &TailAcc::sum, acc, tail));
  }
  if constexpr ((kMask & kAbsSum) != 0) {
    totals->abs_sum.Add(SumOf(&VecAcc::abs_sum, &TailAcc::abs_sum, acc, tail));
  }
  if constexpr ((kMask & kSumSq) != 0) {
    totals->sum_sq.Add(SumOf(&VecAcc::sum_sq, &TailAcc::sum_sq, acc, tail));
  }
  if constexpr ((kMask & kMoments) != 0) {
    totals->shifted.Add(SumOf(&VecAcc::shifted, &TailAcc::shifted, acc, tail));
    totals->shifted_sq.Add(SumOf(&VecAcc::shifted_sq, &TailAcc::shifted_sq, acc, tail));
  }
  if constexpr ((kMask & kAbsMoments) != 0) {
    totals->abs_shifted.Add(SumOf(&VecAcc::abs_shifted, &TailAcc::abs_shifted, acc, tail));
    totals->abs_shifted_sq.Add(SumOf(&VecAcc::abs_shifted_sq, &TailAcc::abs_shifted_sq, acc, tail));
  }
  if constexpr (kProdOn) totals->prod = prod;
}

using BlockKernel = void (*)(const double*, size_t, const Shifts&, Totals*);

template <size_t... kMasks>
constexpr std::array<BlockKernel, sizeof...(kMasks)> MakeKernels(std::index_sequence<kMasks...>) {
  return {&ReduceBlock<static_cast<unsigned>(kMasks)>...};
}

// The kernel of every group mask.
constexpr std::array<BlockKernel, (1u << kGroupCount)> kKernels =
    MakeKernels(std::make_index_sequence<(1u << kGroupCount)>{});

// min/max (and of |x|) of float32 data, on the floats themselves: a float's
// min or max converted to float64 is the min or max of the converted floats,
// so this is exact, and it skips the conversion that dominates the generic
// kernel (four float lanes per SSE register instead of two doubles).
typedef float Vec4 __attribute__((vector_size(16)));
typedef int32_t Mask4 __attribute__((vector_size(16)));

void MinMaxFloat32(const char* data, size_t n, bool plain, bool abs, Totals* totals) {
  constexpr float kFInf = std::numeric_limits<float>::infinity();
  constexpr int V = 4;  // vectors per accumulator: 16 lanes hide minps' latency
  const Vec4 inf{kFInf, kFInf, kFInf, kFInf};
  const Mask4 no_sign{0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
  Vec4 min[V], max[V], abs_min[V], abs_max[V], probe[V];
  for (int k = 0; k < V; ++k) {
    min[k] = abs_min[k] = inf;
    max[k] = abs_max[k] = -inf;
    probe[k] = Vec4{0, 0, 0, 0};
  }
  size_t i = 0;
  for (; i + 4 * V <= n; i += 4 * V) {
#pragma GCC unroll 4
    for (int k = 0; k < V; ++k) {
      Vec4 v;
      std::memcpy(&v, data + (i + 4 * k) * sizeof(float), sizeof(v));
      if (plain) {
        min[k] = v < min[k] ? v : min[k];
        max[k] = v > max[k] ? v : max[k];
      }
      if (abs) {
        const Vec4 a = reinterpret_cast<Vec4>(reinterpret_cast<Mask4>(v) & no_sign);
        abs_min[k] = a < abs_min[k] ? a : abs_min[k];
        abs_max[k] = a > abs_max[k] ? a : abs_max[k];
      }
      probe[k] += v - v;  // NaN for a NaN or an infinity, else 0
    }
  }
  float fmin = kFInf, fmax = -kFInf, famin = kFInf, famax = -kFInf, fprobe = 0;
  for (int k = 0; k < V; ++k) {
    for (int j = 0; j < 4; ++j) {
      fmin = std::min(fmin, min[k][j]);
      fmax = std::max(fmax, max[k][j]);
      famin = std::min(famin, abs_min[k][j]);
      famax = std::max(famax, abs_max[k][j]);
      fprobe += probe[k][j];
    }
  }
  for (; i < n; ++i) {
    float v;
    std::memcpy(&v, data + i * sizeof(float), sizeof(v));
    if (std::isnan(v)) {
      fprobe = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    fmin = std::min(fmin, v);
    fmax = std::max(fmax, v);
    famin = std::min(famin, std::fabs(v));
    famax = std::max(famax, std::fabs(v));
  }
  if (std::isnan(fprobe)) {
    for (size_t j = 0; j < n && !totals->saw_nan; ++j) {
      float v;
      std::memcpy(&v, data + j * sizeof(float), sizeof(v));
      totals->saw_nan = std::isnan(v);
    }
  }
  totals->min = fmin;
  totals->max = fmax;
  totals->abs_min = famin;
  totals->abs_max = famax;
}

// -0.0 and +0.0 compare equal, so which of them a min or max meets first —
// and returns — depends on how the kernel splits the elements over lanes. To
// give every kernel and every combination of reductions the same bits: a
// zero min is -0.0 when the data hold a -0.0, a zero max is +0.0 when they
// hold a +0.0. (|x| has no negative zero.) Only called when a result is zero.
void ResolveZeroSigns(DType dtype, absl::Span<const char> data, Totals* totals) {
  bool negative = false, positive = false;
  ForEachAsFloat64(dtype, data, [&](const double* x, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      if (x[i] == 0.0) (std::signbit(x[i]) ? negative : positive) = true;
    }
  });
  if (totals->min == 0.0) totals->min = negative ? -0.0 : 0.0;
  if (totals->max == 0.0) totals->max = positive ? 0.0 : -0.0;
}

// The median of the finite values among up to 31 elements spread evenly over
// the tensor, and the median of their absolute values (0 when there is none).
// A median is an element's value, so it is exact for integer data and is not
// thrown off by an outlier.
Shifts ChooseShifts(DType dtype, const char* data, size_t n) {
  constexpr size_t kMaxSamples = 31;
  const size_t item = DTypeSize(dtype);
  const size_t samples = std::min(n, kMaxSamples);
  double values[kMaxSamples];
  double abs_values[kMaxSamples];
  size_t count = 0;
  for (size_t j = 0; j < samples; ++j) {
    // floor(j * n / samples), without overflow.
    const size_t index = j * (n / samples) + j * (n % samples) / samples;
    double v;
    ConvertToFloat64(dtype, data + index * item, 1, &v);
    if (std::isfinite(v)) {
      values[count] = v;
      abs_values[count] = std::fabs(v);
      ++count;
    }
  }
  Shifts shifts;
  if (count > 0) {
    std::nth_element(values, values + count / 2, values + count);
    std::nth_element(abs_values, abs_values + count / 2, abs_values + count);
    shifts.value = values[count / 2];
    shifts.abs = abs_values[count / 2];
  }
  return shifts;
}

// Population variance from sums shifted by any constant:
// (sum d^2 - (sum d)^2 / n) / n, never negative through rounding.
double Variance(double shifted, double shifted_sq, double n) {
  const double variance = (shifted_sq - shifted * shifted / n) / n;
  return variance < 0.0 ? 0.0 : variance;  // NaN stays NaN
}

}  // namespace

absl::StatusOr<ReductionKind> ParseReduction(std::string_view name) {
  for (const auto& [kind, kind_name] : kReductionNames) {
    if (kind_name == name) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown reduction ", QuoteInput({name.data(), name.size()}), "; expected one of ",
      absl::StrJoin(kReductionNames, ", ", [](std::string* out, const auto& entry) {
        out->append(entry.second.data(), entry.second.size());
      })));
}

std::string_view ReductionName(ReductionKind kind) {
  for (const auto& [k, name] : kReductionNames) {
    if (k == kind) return name;
  }
  return "invalid";
}

absl::StatusOr<std::vector<double>> ComputeReductions(DType dtype, absl::Span<const char> data,
                                                      absl::Span<const ReductionSpec> specs) {
  TK_ASSIGN_OR_RETURN(const size_t n, ElementCount(dtype, data));
  unsigned mask = 0;
  for (const ReductionSpec& spec : specs) {
    const unsigned group = GroupOf(spec);
    if (group == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid reduction kind ", static_cast<int>(spec.kind)));
    }
    if (n == 0 && (group == kMinMax || group == kAbsMinMax)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot compute ", spec.abs ? "abs " : "",
                                                     std::string(ReductionName(spec.kind)),
                                                     " of an empty tensor (it has no elements)"));
    }
    mask |= group;
  }

  Totals totals;
  if (dtype == DType::kFloat32 && n > 0 && mask != 0 && (mask & ~(kMinMax | kAbsMinMax)) == 0) {
    MinMaxFloat32(data.data(), n, (mask & kMinMax) != 0, (mask & kAbsMinMax) != 0, &totals);
  } else if (mask != 0 && n > 0) {
    const Shifts shifts =
        (mask & (kMoments | kAbsMoments)) != 0 ? ChooseShifts(dtype, data.data(), n) : Shifts{};
    const BlockKernel kernel = kKernels[mask];
    ForEachAsFloat64(dtype, data, [&](const double* x, size_t count) {
      kernel(x, count, shifts, &totals);
    });
  }

  if ((mask & kMinMax) != 0 && n > 0 && !totals.saw_nan &&
      (totals.min == 0.0 || totals.max == 0.0)) {
    ResolveZeroSigns(dtype, data, &totals);
  }

  const double count = static_cast<double>(n);
  std::vector<double> results;
  results.reserve(specs.size());
  for (const ReductionSpec& spec : specs) {
    double result = kNaN;
    switch (spec.kind) {
      case ReductionKind::kMin:
        result = totals.saw_nan ? kNaN : spec.abs ? totals.abs_min : totals.min;
        break;
      case ReductionKind::kMax:
        result = totals.saw_nan ? kNaN : spec.abs ? totals.abs_max : totals.max;
        break;
      case ReductionKind::kMean:
        if (n > 0) result = (spec.abs ? totals.abs_sum : totals.sum).Total() / count;
        break;
      case ReductionKind::kStd:
      case ReductionKind::kVariance:
        if (n > 0) {
          result = spec.abs
                       ? Variance(totals.abs_shifted.Total(), totals.abs_shifted_sq.Total(), count)
                       : Variance(totals.shifted.Total(), totals.shifted_sq.Total(), count);
          if (spec.kind == ReductionKind::kStd) result = std::sqrt(result);
        }
        break;
      case ReductionKind::kSum:
        result = (spec.abs ? totals.abs_sum : totals.sum).Total();
        break;
      case ReductionKind::kProd:
        result = spec.abs ? std::fabs(totals.prod) : totals.prod;
        break;
      case ReductionKind::kL1:
        result = totals.abs_sum.Total();
        break;
      case ReductionKind::kL2:
        result = std::sqrt(totals.sum_sq.Total());
        break;
    }
    results.push_back(result);
  }
  return results;
}

}  // namespace tensorkeep
