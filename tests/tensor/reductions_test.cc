#include "tensor/reductions.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/dtype.h"

namespace tensorkeep {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr ReductionKind kAllKinds[] = {
    ReductionKind::kMin,  ReductionKind::kMax,      ReductionKind::kMean,
    ReductionKind::kStd,  ReductionKind::kVariance, ReductionKind::kSum,
    ReductionKind::kProd, ReductionKind::kL1,       ReductionKind::kL2};

// All 18 reductions: each kind, of x and of |x|.
std::vector<ReductionSpec> AllSpecs() {
  std::vector<ReductionSpec> specs;
  for (bool abs : {false, true}) {
    for (ReductionKind kind : kAllKinds) specs.push_back({kind, abs});
  }
  return specs;
}

std::string SpecName(const ReductionSpec& spec) {
  return std::string(spec.abs ? "abs " : "") + std::string(ReductionName(spec.kind));
}

template <typename T>
std::string BytesOf(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A tensor as bytes plus its values as float64, computed independently of the
// library (except float16, through the separately tested HalfToFloat).
struct TestTensor {
  DType dtype;
  std::string bytes;
  std::vector<double> values;
};

TestTensor RandomTensor(DType dtype, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TestTensor t{dtype, "", {}};
  auto add = [&](auto value) {
    t.bytes.append(reinterpret_cast<const char*>(&value), sizeof(value));
  };
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kFloat16: {
        // Mostly normal values, some subnormals.
        const float f = i % 17 == 0 ? std::uniform_real_distribution<float>(-6e-5f, 6e-5f)(rng)
                                    : std::uniform_real_distribution<float>(-100, 100)(rng);
        const uint16_t h = FloatToHalf(f);
        add(h);
        t.values.push_back(HalfToFloat(h));
        break;
      }
      case DType::kFloat32: {
        const float f = std::uniform_real_distribution<float>(-1000, 1000)(rng);
        add(f);
        t.values.push_back(f);
        break;
      }
      case DType::kFloat64: {
        const double d = std::normal_distribution<double>(5.0, 2.0)(rng);
        add(d);
        t.values.push_back(d);
        break;
      }
      case DType::kInt8: {
        const auto v = static_cast<int8_t>(rng());
        add(v);
        t.values.push_back(v);
        break;
      }
      case DType::kInt16: {
        const auto v = static_cast<int16_t>(rng());
        add(v);
        t.values.push_back(v);
        break;
      }
      case DType::kInt32: {
        const auto v = static_cast<int32_t>(rng());
        add(v);
        t.values.push_back(v);
        break;
      }
      case DType::kInt64: {
        const auto v = static_cast<int64_t>(rng());
        add(v);
        t.values.push_back(static_cast<double>(v));
        break;
      }
      case DType::kUInt8: {
        const auto v = static_cast<uint8_t>(rng());
        add(v);
        t.values.push_back(v);
        break;
      }
      case DType::kBFloat16: {
        // bfloat16 keeps float32's range: values from 1e-30 to 1e30 and both signs.
        const float magnitude =
            std::pow(10.0f, std::uniform_real_distribution<float>(-30, 30)(rng));
        const uint16_t b = FloatToBFloat16(rng() % 2 == 0 ? magnitude : -magnitude);
        add(b);
        t.values.push_back(BFloat16ToFloat(b));
        break;
      }
      case DType::kBool: {
        const bool v = rng() % 2 == 0;
        add(static_cast<uint8_t>(v));
        t.values.push_back(v ? 1.0 : 0.0);
        break;
      }
    }
  }
  return t;
}

// numpy's answer computed the obvious way: long double sums, a two-pass
// variance, a float64 product in element order.
double Reference(const std::vector<double>& x, const ReductionSpec& spec) {
  std::vector<double> v = x;
  if (spec.abs) {
    for (double& e : v) e = std::fabs(e);
  }
  const bool any_nan = std::any_of(v.begin(), v.end(), [](double e) { return std::isnan(e); });
  long double sum = 0, abs_sum = 0, sum_sq = 0;
  for (double e : v) {
    sum += e;
    abs_sum += std::fabs(e);
    sum_sq += static_cast<long double>(e) * e;
  }
  const long double n = v.size();
  switch (spec.kind) {
    case ReductionKind::kMin:
      return any_nan ? kNaN : *std::min_element(v.begin(), v.end());
    case ReductionKind::kMax:
      return any_nan ? kNaN : *std::max_element(v.begin(), v.end());
    case ReductionKind::kMean:
      return static_cast<double>(sum / n);
    case ReductionKind::kStd:
    case ReductionKind::kVariance: {
      const long double mean = sum / n;
      long double squares = 0;
      for (double e : v) squares += (e - mean) * (e - mean);
      const long double variance = squares / n;
      return static_cast<double>(spec.kind == ReductionKind::kStd ? std::sqrt(variance) : variance);
    }
    case ReductionKind::kSum:
      return static_cast<double>(sum);
    case ReductionKind::kProd: {
      double prod = 1.0;
      for (double e : v) prod *= e;
      return prod;
    }
    case ReductionKind::kL1:
      return static_cast<double>(abs_sum);
    case ReductionKind::kL2:
      return static_cast<double>(std::sqrt(sum_sq));
  }
  return kNaN;
}

// The error allowed for `spec` of `x`: a few ulps of the magnitudes summed.
double Tolerance(const std::vector<double>& x, const ReductionSpec& spec) {
  long double abs_sum = 0, sum_sq = 0;
  for (double e : x) {
    abs_sum += std::fabs(e);
    sum_sq += static_cast<long double>(e) * e;
  }
  const double n = std::max<double>(1, x.size());
  constexpr double kRelative = 1e-13;
  switch (spec.kind) {
    case ReductionKind::kMin:
    case ReductionKind::kMax:
    case ReductionKind::kProd:
      return 0;  // exact
    case ReductionKind::kMean:
      return kRelative * static_cast<double>(abs_sum) / n;
    case ReductionKind::kSum:
    case ReductionKind::kL1:
      return kRelative * static_cast<double>(abs_sum);
    case ReductionKind::kVariance:
      return kRelative * static_cast<double>(sum_sq) / n;
    case ReductionKind::kStd:
    case ReductionKind::kL2:
      return kRelative * std::sqrt(static_cast<double>(sum_sq));
  }
  return 0;
}

void ExpectSame(double got, double want, double tolerance, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
  } else if (tolerance == 0 || std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, tolerance) << what;
  }
}

std::vector<double> Compute(DType dtype, const std::string& bytes,
                            const std::vector<ReductionSpec>& specs) {
  absl::StatusOr<std::vector<double>> results =
      ComputeReductions(dtype, absl::MakeConstSpan(bytes.data(), bytes.size()), specs);
  EXPECT_TRUE(results.ok()) << results.status();
  if (!results.ok()) return std::vector<double>(specs.size(), kNaN);
  EXPECT_EQ(results->size(), specs.size());
  return *results;
}

std::vector<double> ComputeOf(const std::vector<double>& values,
                              const std::vector<ReductionSpec>& specs) {
  return Compute(DType::kFloat64, BytesOf(values), specs);
}

double ComputeOne(const std::vector<double>& values, ReductionKind kind, bool abs = false) {
  return ComputeOf(values, {{kind, abs}})[0];
}

class ReductionsAgreeWithReferenceTest
    : public ::testing::TestWithParam<std::tuple<DType, size_t>> {};

TEST_P(ReductionsAgreeWithReferenceTest, AllEighteenReductions) {
  const auto [dtype, n] = GetParam();
  const TestTensor tensor = RandomTensor(dtype, n, /*seed=*/n * 31 + static_cast<int>(dtype));
  const std::vector<ReductionSpec> specs = AllSpecs();
  const std::vector<double> got = Compute(dtype, tensor.bytes, specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    ExpectSame(got[i], Reference(tensor.values, specs[i]), Tolerance(tensor.values, specs[i]),
               SpecName(specs[i]));
  }
}

TEST_P(ReductionsAgreeWithReferenceTest, EachReductionAloneGivesTheSameBits) {
  // Only the accumulators a call needs are computed; that must not change the
  // answer of any reduction.
  const auto [dtype, n] = GetParam();
  const TestTensor tensor = RandomTensor(dtype, n, /*seed=*/n * 7 + static_cast<int>(dtype));
  const std::vector<ReductionSpec> specs = AllSpecs();
  const std::vector<double> together = Compute(dtype, tensor.bytes, specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    const double alone = Compute(dtype, tensor.bytes, {specs[i]})[0];
    if (std::isnan(together[i])) {
      EXPECT_TRUE(std::isnan(alone)) << SpecName(specs[i]);
    } else {
      EXPECT_EQ(alone, together[i]) << SpecName(specs[i]);
    }
  }
  // And a pair that shares no accumulator.
  const std::vector<double> pair =
      Compute(dtype, tensor.bytes, {{ReductionKind::kL2}, {ReductionKind::kMin, true}});
  EXPECT_EQ(pair[0], together[8]);
  if (!std::isnan(together[9])) {
    EXPECT_EQ(pair[1], together[9]);
  }
}

TEST_P(ReductionsAgreeWithReferenceTest, DataNeedNotBeAligned) {
  const auto [dtype, n] = GetParam();
  const TestTensor tensor = RandomTensor(dtype, n, /*seed=*/n);
  const std::string shifted = "x" + tensor.bytes;
  const std::vector<ReductionSpec> specs = AllSpecs();
  absl::StatusOr<std::vector<double>> got =
      ComputeReductions(dtype, absl::MakeConstSpan(shifted.data() + 1, tensor.bytes.size()), specs);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<double> want = Compute(dtype, tensor.bytes, specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!std::isnan(want[i])) {
      EXPECT_EQ((*got)[i], want[i]) << SpecName(specs[i]);
    }
  }
}

std::string DTypeAndSizeName(const ::testing::TestParamInfo<std::tuple<DType, size_t>>& info) {
  return std::string(DTypeName(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param));
}

// Sizes around the 8-element SIMD groups and the 1024-element blocks.
INSTANTIATE_TEST_SUITE_P(
    AllDTypes, ReductionsAgreeWithReferenceTest,
    ::testing::Combine(::testing::Values(DType::kFloat16, DType::kFloat32, DType::kFloat64,
                                         DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64,
                                         DType::kUInt8, DType::kBool, DType::kBFloat16),
                       ::testing::Values(1, 2, 7, 8, 9, 1023, 1024, 1025, 4099, 100003)),
    DTypeAndSizeName);

TEST(ReductionsTest, MatchesNumpyOnFixedInput) {
  // Produced with numpy 1.24 on a = np.array([1.5, -2.25, 3.0, 0.1, -7.5, 1e-3,
  // 42.0], dtype=np.float32).astype(np.float64): np.min(a), ..., np.var(a),
  // np.linalg.norm(a, 1), np.linalg.norm(a), and the same of np.abs(a).
  const std::vector<float> a = {1.5f, -2.25f, 3.0f, 0.1f, -7.5f, 1e-3f, 42.0f};
  const std::vector<double> want = {
      -7.5, 42.0, 5.264428571648231, 15.318397173233024, 234.6532919569135, 36.851000001537614,
      0.3189375199012577, 56.351000001537614, 42.8552505651326,
      // abs
      0.0010000000474974513, 42.0, 8.050142857362516, 14.055699915655392, 197.562700118955,
      56.351000001537614, 0.3189375199012577, 56.351000001537614, 42.8552505651326};
  const std::vector<ReductionSpec> specs = AllSpecs();
  const std::vector<double> got = Compute(DType::kFloat32, BytesOf(a), specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_DOUBLE_EQ(got[i], want[i]) << SpecName(specs[i]);
  }
}

TEST(ReductionsTest, EmptyTensorGivesNumpysIdentitiesAndNaNs) {
  const std::vector<ReductionSpec> specs = {
      {ReductionKind::kSum},       {ReductionKind::kProd},      {ReductionKind::kL1},
      {ReductionKind::kL2},        {ReductionKind::kMean},      {ReductionKind::kStd},
      {ReductionKind::kVariance},  {ReductionKind::kSum, true}, {ReductionKind::kProd, true},
      {ReductionKind::kMean, true}};
  for (DType dtype : {DType::kFloat32, DType::kInt64, DType::kBool}) {
    const std::vector<double> got = Compute(dtype, "", specs);
    EXPECT_EQ(got[0], 0.0);
    EXPECT_EQ(got[1], 1.0);
    EXPECT_EQ(got[2], 0.0);
    EXPECT_EQ(got[3], 0.0);
    EXPECT_TRUE(std::isnan(got[4]));
    EXPECT_TRUE(std::isnan(got[5]));
    EXPECT_TRUE(std::isnan(got[6]));
    EXPECT_EQ(got[7], 0.0);
    EXPECT_EQ(got[8], 1.0);
    EXPECT_TRUE(std::isnan(got[9]));
  }
}

TEST(ReductionsTest, RejectsMinAndMaxOfEmptyTensor) {
  for (const auto& [spec, name] : std::vector<std::pair<ReductionSpec, std::string>>{
           {{ReductionKind::kMin}, "min"},
           {{ReductionKind::kMax}, "max"},
           {{ReductionKind::kMin, true}, "abs min"},
           {{ReductionKind::kMax, true}, "abs max"}}) {
    absl::StatusOr<std::vector<double>> got =
        ComputeReductions(DType::kFloat32, {}, {{ReductionKind::kSum}, spec});
    ASSERT_FALSE(got.ok()) << name;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr(name + " of an empty tensor"));
  }
}

TEST(ReductionsTest, NaNAnywhereMakesMinMaxSumsAndMomentsNaN) {
  for (size_t position :
       {size_t{0}, size_t{5}, size_t{1023}, size_t{1024}, size_t{2998}, size_t{2999}}) {
    std::vector<double> values(3000);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 100) - 50;
    values[position] = kNaN;
    const std::vector<double> got = ComputeOf(values, AllSpecs());
    for (size_t i = 0; i < got.size(); ++i) {
      const ReductionKind kind = AllSpecs()[i].kind;
      if (kind == ReductionKind::kProd) continue;  // 0 * ... * NaN: NaN too, checked below
      EXPECT_TRUE(std::isnan(got[i])) << SpecName(AllSpecs()[i]) << " at " << position;
    }
  }
  // NaN after an infinity in the same block, and NaN among infinities only.
  EXPECT_TRUE(std::isnan(ComputeOne({kInf, kNaN, 1.0}, ReductionKind::kMin)));
  EXPECT_TRUE(std::isnan(ComputeOne({-kInf, kNaN}, ReductionKind::kMax, true)));
  EXPECT_TRUE(std::isnan(ComputeOne({2.0, kNaN, 3.0}, ReductionKind::kProd)));
  // A float32 NaN too.
  const std::vector<float> f = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  EXPECT_TRUE(std::isnan(Compute(DType::kFloat32, BytesOf(f), {{ReductionKind::kMax}})[0]));
}

TEST(ReductionsTest, Float32MinMaxSeeNaNsAndInfinitiesAnywhere) {
  // float32 min/max take their own path (no conversion to float64): a NaN or
  // an infinity in the vector part or in the tail, alone or together.
  constexpr float kFNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kFInf = std::numeric_limits<float>::infinity();
  const std::vector<ReductionSpec> specs = {{ReductionKind::kMin},
                                            {ReductionKind::kMax},
                                            {ReductionKind::kMin, true},
                                            {ReductionKind::kMax, true}};
  for (size_t n : {size_t{3}, size_t{16}, size_t{17}, size_t{1000}, size_t{1037}}) {
    for (size_t position = 0; position < n; position += (n > 40 ? 97 : 1)) {
      std::vector<float> f(n);
      for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(i % 13) - 6.5f;
      // An infinity alone: the extremes move to it, nothing is NaN.
      f[position] = -kFInf;
      double max = -kInf, abs_min = kInf;
      for (float v : f) {
        max = std::max(max, static_cast<double>(v));
        abs_min = std::min(abs_min, std::fabs(static_cast<double>(v)));
      }
      std::vector<double> got = Compute(DType::kFloat32, BytesOf(f), specs);
      EXPECT_EQ(got[0], -kInf) << n << "/" << position;
      EXPECT_EQ(got[1], max) << n << "/" << position;
      EXPECT_EQ(got[2], abs_min) << n << "/" << position;
      EXPECT_EQ(got[3], kInf) << n << "/" << position;
      // A NaN makes every one NaN.
      f[(position + n / 2) % n] = kFNaN;
      got = Compute(DType::kFloat32, BytesOf(f), specs);
      for (size_t i = 0; i < specs.size(); ++i) {
        EXPECT_TRUE(std::isnan(got[i])) << SpecName(specs[i]) << " " << n << "/" << position;
      }
    }
  }
}

TEST(ReductionsTest, SignedZeroMinAndMaxDoNotDependOnTheOtherReductionsAsked) {
  // -0.0 == +0.0: a zero min is -0.0 when a -0.0 is present, a zero max +0.0
  // when a +0.0 is, whatever kernel or lane layout computes them.
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (size_t n : {size_t{3}, size_t{16}, size_t{17}, size_t{2000}}) {
      for (size_t neg : {size_t{0}, n / 2, n - 1}) {
        for (size_t pos : {size_t{1 % n}, n - 1 - n / 3}) {
          if (pos == neg) continue;
          std::vector<double> values(n, 1.0);
          std::vector<double> negatives(n, -1.0);
          values[neg] = -0.0;
          values[pos] = 0.0;
          negatives[neg] = -0.0;
          negatives[pos] = 0.0;
          for (const auto* v : {&values, &negatives}) {
            std::string bytes;
            if (dtype == DType::kFloat32) {
              std::vector<float> f(v->begin(), v->end());
              bytes = BytesOf(f);
            } else {
              bytes = BytesOf(*v);
            }
            const double min_alone = Compute(dtype, bytes, {{ReductionKind::kMin}})[0];
            const double max_alone = Compute(dtype, bytes, {{ReductionKind::kMax}})[0];
            const std::vector<double> with_mean =
                Compute(dtype, bytes, {{ReductionKind::kMin}, {ReductionKind::kMax},
                                       {ReductionKind::kMean}});
            const std::string where = std::string(DTypeName(dtype)) + " n=" + std::to_string(n) +
                                      " -0 at " + std::to_string(neg) + " +0 at " +
                                      std::to_string(pos);
            if (v == &values) {
              EXPECT_EQ(min_alone, 0.0) << where;
              EXPECT_TRUE(std::signbit(min_alone)) << where;
              EXPECT_TRUE(std::signbit(with_mean[0])) << where;
            } else {
              EXPECT_EQ(max_alone, 0.0) << where;
              EXPECT_FALSE(std::signbit(max_alone)) << where;
              EXPECT_FALSE(std::signbit(with_mean[1])) << where;
            }
            EXPECT_EQ(std::signbit(min_alone), std::signbit(with_mean[0])) << where;
            EXPECT_EQ(std::signbit(max_alone), std::signbit(with_mean[1])) << where;
          }
        }
      }
    }
  }
}

TEST(ReductionsTest, InfinitiesBehaveAsInNumpy) {
  // np.max([1, inf, 3]) == inf, np.mean == inf, np.var == nan (inf - inf).
  const std::vector<double> got = ComputeOf({1.0, kInf, 3.0}, {{ReductionKind::kMin},
                                                               {ReductionKind::kMax},
                                                               {ReductionKind::kMean},
                                                               {ReductionKind::kVariance},
                                                               {ReductionKind::kStd},
                                                               {ReductionKind::kSum},
                                                               {ReductionKind::kL1},
                                                               {ReductionKind::kL2},
                                                               {ReductionKind::kProd}});
  EXPECT_EQ(got[0], 1.0);
  EXPECT_EQ(got[1], kInf);
  EXPECT_EQ(got[2], kInf);
  EXPECT_TRUE(std::isnan(got[3]));
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_EQ(got[5], kInf);
  EXPECT_EQ(got[6], kInf);
  EXPECT_EQ(got[7], kInf);
  EXPECT_EQ(got[8], kInf);
  EXPECT_TRUE(std::isnan(ComputeOne({kInf, -kInf}, ReductionKind::kMean)));
  EXPECT_EQ(ComputeOne({kInf, -kInf}, ReductionKind::kMean, true), kInf);
  EXPECT_EQ(ComputeOne({-kInf, 5.0, 7.0}, ReductionKind::kMin), -kInf);
  EXPECT_EQ(ComputeOne({-kInf, 5.0, 7.0}, ReductionKind::kMax), 7.0);
  EXPECT_EQ(ComputeOne({-kInf, 5.0, 7.0}, ReductionKind::kMin, true), 5.0);
  EXPECT_EQ(ComputeOne({-kInf, 5.0, 7.0}, ReductionKind::kMax, true), kInf);
  // Overflow of the sum of finite values, as numpy's float64 sum.
  EXPECT_EQ(ComputeOne({1e308, 1e308}, ReductionKind::kMean), kInf);
}

TEST(ReductionsTest, ProdMultipliesInOrderLikeNumpy) {
  // numpy 1.24: np.prod([1e200, 1e200, 1e-200, 1e-200]) == inf (overflow
  // first), np.prod([1e200, 1e-200, 1e200, 1e-200]) == 1.0,
  // np.prod([1e200, 1e200, 0.0] + [1.0] * 20) is nan, with 0.0 first it is 0.0.
  EXPECT_EQ(ComputeOne({1e200, 1e200, 1e-200, 1e-200}, ReductionKind::kProd), kInf);
  EXPECT_DOUBLE_EQ(ComputeOne({1e200, 1e-200, 1e200, 1e-200}, ReductionKind::kProd), 1.0);
  std::vector<double> zero_last = {1e200, 1e200, 0.0};
  std::vector<double> zero_first = {0.0, 1e200, 1e200};
  zero_last.resize(23, 1.0);
  zero_first.resize(23, 1.0);
  EXPECT_TRUE(std::isnan(ComputeOne(zero_last, ReductionKind::kProd)));
  EXPECT_EQ(ComputeOne(zero_first, ReductionKind::kProd), 0.0);
  EXPECT_EQ(ComputeOne({-2.0, 3.0, -4.0, -0.5}, ReductionKind::kProd), -12.0);
  EXPECT_EQ(ComputeOne({-2.0, 3.0, -4.0, -0.5}, ReductionKind::kProd, true), 12.0);
}

TEST(ReductionsTest, VarianceIsAccurateForLargeMeanAndSmallSpread) {
  // 1e9 + k for k in [0, 1000): all exact in float64; the population variance
  // is (1000^2 - 1) / 12 = 83333.25 exactly. E[x^2] - E[x]^2 in float64 would
  // be off by thousands.
  std::vector<double> values;
  for (int k = 0; k < 1000; ++k) values.push_back(1e9 + k);
  EXPECT_NEAR(ComputeOne(values, ReductionKind::kVariance), 83333.25, 1e-6);
  EXPECT_NEAR(ComputeOne(values, ReductionKind::kStd), std::sqrt(83333.25), 1e-9);
  EXPECT_NEAR(ComputeOne(values, ReductionKind::kVariance, true), 83333.25, 1e-6);

  // 1e12 + {0, 1}, alternating: variance 0.25.
  std::vector<double> two_values;
  for (int k = 0; k < 10001; ++k) two_values.push_back(1e12 + (k % 2));
  const double want = Reference(two_values, {ReductionKind::kVariance});
  EXPECT_NEAR(ComputeOne(two_values, ReductionKind::kVariance), want, 1e-9);

  // float32 data around 1e4 with a spread of 2^-10.
  std::vector<float> f;
  std::vector<double> f_values;
  for (int k = 0; k < 5000; ++k) {
    f.push_back(10000.0f + static_cast<float>(k % 8) * 0x1p-10f);
    f_values.push_back(f.back());
  }
  EXPECT_NEAR(Compute(DType::kFloat32, BytesOf(f), {{ReductionKind::kVariance}})[0],
              Reference(f_values, {ReductionKind::kVariance}), 1e-15);
}

TEST(ReductionsTest, VarianceIsAccurateWhenTheFirstElementIsAnOutlier) {
  std::vector<double> values = {1e8};
  std::mt19937_64 rng(1);
  for (int k = 0; k < 20000; ++k) values.push_back(std::normal_distribution<double>(0, 1)(rng));
  const double want = Reference(values, {ReductionKind::kVariance});
  EXPECT_NEAR(ComputeOne(values, ReductionKind::kVariance), want, want * 1e-12);
}

TEST(ReductionsTest, BoolCountsAsZeroOrOne) {
  // numpy: np.array([False, True, True, True, False]); any non-zero byte is
  // True.
  const std::string bytes("\x00\x01\x02\xff\x00", 5);
  const std::vector<double> got = Compute(DType::kBool, bytes,
                                          {{ReductionKind::kSum},
                                           {ReductionKind::kMean},
                                           {ReductionKind::kMax},
                                           {ReductionKind::kMin},
                                           {ReductionKind::kProd},
                                           {ReductionKind::kL2},
                                           {ReductionKind::kVariance}});
  EXPECT_EQ(got[0], 3.0);
  EXPECT_DOUBLE_EQ(got[1], 0.6);
  EXPECT_EQ(got[2], 1.0);
  EXPECT_EQ(got[3], 0.0);
  EXPECT_EQ(got[4], 0.0);
  EXPECT_DOUBLE_EQ(got[5], std::sqrt(3.0));
  EXPECT_DOUBLE_EQ(got[6], 0.24);
}

TEST(ReductionsTest, Int64ExtremesConvertToFloat64First) {
  const std::vector<int64_t> values = {std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max()};
  const std::vector<double> got = Compute(DType::kInt64, BytesOf(values),
                                          {{ReductionKind::kMin},
                                           {ReductionKind::kMax},
                                           {ReductionKind::kSum},
                                           {ReductionKind::kMax, true},
                                           {ReductionKind::kL1},
                                           {ReductionKind::kMean},
                                           {ReductionKind::kVariance},
                                           {ReductionKind::kProd}});
  EXPECT_EQ(got[0], -0x1p63);
  EXPECT_EQ(got[1], 0x1p63);  // 2^63 - 1 rounds up, as in numpy
  EXPECT_EQ(got[2], 0.0);
  EXPECT_EQ(got[3], 0x1p63);
  EXPECT_EQ(got[4], 0x1p64);
  EXPECT_EQ(got[5], 0.0);
  EXPECT_EQ(got[6], 0x1p126);
  EXPECT_EQ(got[7], -0x1p126);
  // int8's -128 has abs 128 (no wrap-around).
  EXPECT_EQ(Compute(DType::kInt8, std::string("\x80", 1), {{ReductionKind::kMax, true}})[0], 128.0);
}

TEST(ReductionsTest, RejectsInvalidArguments) {
  const std::string seven_bytes(7, '\0');
  absl::StatusOr<std::vector<double>> got =
      ComputeReductions(DType::kFloat32, seven_bytes, {{ReductionKind::kSum}});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(),
              HasSubstr("7 bytes, not a multiple of the 4-byte size of float32"));

  got = ComputeReductions(static_cast<DType>(0), {}, {{ReductionKind::kSum}});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("invalid dtype 0"));

  got = ComputeReductions(DType::kFloat32, {}, {{static_cast<ReductionKind>(99)}});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("invalid reduction kind 99"));
}

TEST(ReductionsTest, NoSpecsGiveNoResults) {
  absl::StatusOr<std::vector<double>> got =
      ComputeReductions(DType::kFloat32, std::string(8, '\0'), {});
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty());
}

TEST(ReductionNameTest, NamesRoundTripThroughParse) {
  const std::vector<std::string> names = {"min", "max",  "mean", "std", "variance",
                                          "sum", "prod", "l1",   "l2"};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(ReductionName(kAllKinds[i]), names[i]);
    absl::StatusOr<ReductionKind> parsed = ParseReduction(names[i]);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kAllKinds[i]);
  }
  EXPECT_EQ(ReductionName(static_cast<ReductionKind>(99)), "invalid");
}

TEST(ReductionNameTest, ParseRejectsUnknownNameAndListsAcceptedNames) {
  for (const char* name : {"var", "Mean", "", "l3", "abs_min"}) {
    absl::StatusOr<ReductionKind> parsed = ParseReduction(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(),
                HasSubstr("expected one of min, max, mean, std, variance, sum, prod, l1, l2"));
  }
}

}  // namespace
}  // namespace tensorkeep
