#include "tensor/histogram.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/dtype.h"

namespace tensorkeep {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
std::string BytesOf(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

Histogram HistogramOf(const std::vector<double>& values, int bins,
                      std::optional<std::pair<double, double>> range = std::nullopt) {
  const std::string bytes = BytesOf(values);
  absl::StatusOr<Histogram> histogram = ComputeHistogram(DType::kFloat64, bytes, bins, range);
  EXPECT_TRUE(histogram.ok()) << histogram.status();
  return histogram.ok() ? *histogram : Histogram{};
}

uint64_t Total(const Histogram& h) {
  return std::accumulate(h.counts.begin(), h.counts.end(), uint64_t{0}) + h.nan_count +
         h.outside_count;
}

TEST(HistogramTest, MatchesNumpyWithAutomaticRange) {
  // numpy 1.24: np.histogram(np.array([0.5, -1.25, 3.0, 2.75, 0.0, -1.25, 1.0,
  // 2.0, 3.0, 0.3]), bins=5).
  const Histogram h = HistogramOf({0.5, -1.25, 3.0, 2.75, 0.0, -1.25, 1.0, 2.0, 3.0, 0.3}, 5);
  EXPECT_THAT(h.counts, ElementsAre(2, 2, 2, 1, 3));
  EXPECT_THAT(h.edges,
              ElementsAre(-1.25, -0.4, 0.44999999999999996, 1.2999999999999998, 2.15, 3.0));
  EXPECT_EQ(h.nan_count, 0u);
  EXPECT_EQ(h.outside_count, 0u);
}

TEST(HistogramTest, MatchesNumpyWithGivenRange) {
  // numpy 1.24: np.histogram(<same array>, bins=3, range=(-0.3, 1.7)); numpy
  // drops the 6 values outside, we count them.
  const Histogram h =
      HistogramOf({0.5, -1.25, 3.0, 2.75, 0.0, -1.25, 1.0, 2.0, 3.0, 0.3}, 3, {{-0.3, 1.7}});
  EXPECT_THAT(h.counts, ElementsAre(2, 2, 0));
  EXPECT_THAT(h.edges, ElementsAre(-0.3, 0.36666666666666664, 1.0333333333333332, 1.7));
  EXPECT_EQ(h.outside_count, 6u);
}

TEST(HistogramTest, EdgesAreNumpysLinspace) {
  // numpy 1.24: np.linspace(-0.3, 1.7, 8), bit for bit.
  const Histogram h = HistogramOf({0.0}, 7, {{-0.3, 1.7}});
  EXPECT_THAT(h.edges,
              ElementsAre(-0.3, -0.01428571428571429, 0.2714285714285714, 0.5571428571428572,
                          0.8428571428571427, 1.1285714285714283, 1.4142857142857141, 1.7));
}

TEST(HistogramTest, ValuesOnInnerEdgesGoToTheBinOnTheRight) {
  // numpy 1.24: np.histogram(np.array([0.1, 0.2, ..., 1.0]), bins=10) puts
  // one value in each bin although the edges (0.19, 0.28, ...) are inexact.
  const Histogram h = HistogramOf({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}, 10);
  EXPECT_THAT(h.counts, ElementsAre(1, 1, 1, 1, 1, 1, 1, 1, 1, 1));
  EXPECT_THAT(h.edges, ElementsAre(0.1, 0.19, 0.28, 0.37, 0.45999999999999996, 0.5499999999999999,
                                   0.64, 0.73, 0.82, 0.9099999999999999, 1.0));
}

TEST(HistogramTest, CorrectsTheScaledBinAgainstTheEdgesAsNumpyDoes) {
  // Found by searching with numpy 1.24 for values where numpy's scaled index
  // (x - lo) / (hi - lo) * bins is one bin off and its edge comparisons fix
  // it; np.histogram([x], bins=62, range=(lo, hi)) puts the first in bin 20
  // (the scaling says 21), the second in bin 1 (the scaling says 0).
  const std::pair<double, double> range = {2.739233746429086, 16.22929964790884};
  Histogram h = HistogramOf({7.308449616285131}, 62, range);
  EXPECT_EQ(h.counts[20], 1u);
  EXPECT_EQ(h.edges[21], 7.308449616285132);
  h = HistogramOf({2.956815454517469}, 62, range);
  EXPECT_EQ(h.counts[1], 1u);
  EXPECT_EQ(h.edges[1], 2.956815454517469);
}

TEST(HistogramTest, LastBinIncludesItsRightEdge) {
  // numpy: np.histogram([0, 1, 2, 3, 4], bins=4) -> [1, 1, 1, 2].
  const Histogram h = HistogramOf({0, 1, 2, 3, 4}, 4);
  EXPECT_THAT(h.counts, ElementsAre(1, 1, 1, 2));
  EXPECT_THAT(h.edges, ElementsAre(0, 1, 2, 3, 4));
  // Also with a given range whose hi is a value.
  EXPECT_THAT(HistogramOf({0, 1, 2, 3, 4}, 2, {{2.0, 4.0}}).counts, ElementsAre(1, 2));
}

TEST(HistogramTest, EqualMinAndMaxWidenTheRangeByAHalf) {
  // numpy: np.histogram([5., 5.], bins=2) -> [0, 2], edges [4.5, 5, 5.5].
  const Histogram h = HistogramOf({5.0, 5.0}, 2);
  EXPECT_THAT(h.counts, ElementsAre(0, 2));
  EXPECT_THAT(h.edges, ElementsAre(4.5, 5.0, 5.5));
}

TEST(HistogramTest, EqualHugeValuesStillGetARangeOfPositiveWidth) {
  // At 1e20, +-0.5 is lost to rounding.
  const Histogram h = HistogramOf({1e20, 1e20, 1e20}, 4);
  EXPECT_LT(h.edges.front(), 1e20);
  EXPECT_GT(h.edges.back(), 1e20);
  EXPECT_EQ(std::accumulate(h.counts.begin(), h.counts.end(), uint64_t{0}), 3u);
  EXPECT_EQ(h.outside_count, 0u);
}

TEST(HistogramTest, EmptyTensorUsesTheUnitRange) {
  // numpy: np.histogram(np.array([]), bins=2) -> [0, 0], edges [0, 0.5, 1].
  const Histogram h = HistogramOf({}, 2);
  EXPECT_THAT(h.counts, ElementsAre(0, 0));
  EXPECT_THAT(h.edges, ElementsAre(0.0, 0.5, 1.0));
}

TEST(HistogramTest, CountsNaNsAndInfinitiesApartFromTheFiniteRange) {
  const Histogram h = HistogramOf({1.0, kNaN, kInf, -kInf, 2.0, kNaN, 1.5}, 2);
  EXPECT_THAT(h.edges, ElementsAre(1.0, 1.5, 2.0));  // range of the finite values
  EXPECT_THAT(h.counts, ElementsAre(1, 2));
  EXPECT_EQ(h.nan_count, 2u);
  EXPECT_EQ(h.outside_count, 2u);

  const Histogram all_nan = HistogramOf({kNaN, kNaN, kNaN}, 4);
  EXPECT_THAT(all_nan.edges, ElementsAre(0.0, 0.25, 0.5, 0.75, 1.0));
  EXPECT_THAT(all_nan.counts, ElementsAre(0, 0, 0, 0));
  EXPECT_EQ(all_nan.nan_count, 3u);

  const Histogram only_infinities = HistogramOf({kInf, -kInf}, 1);
  EXPECT_THAT(only_infinities.edges, ElementsAre(0.0, 1.0));
  EXPECT_EQ(only_infinities.outside_count, 2u);
}

TEST(HistogramTest, CountsValuesOutsideAGivenRange) {
  const Histogram h = HistogramOf({-1.0, 0.0, 0.5, 1.0, 1.0000001, 10.0, kInf}, 2, {{0.0, 1.0}});
  EXPECT_THAT(h.counts, ElementsAre(1, 2));
  EXPECT_EQ(h.outside_count, 4u);
}

TEST(HistogramTest, BinsAgreeWithTheEdgesOnRandomData) {
  // Whatever numpy's scaling does, its final bins satisfy
  // edges[i] <= x < edges[i+1] (the last bin closed); check that definition
  // directly on many values and awkward bin counts.
  std::mt19937_64 rng(3);
  std::vector<double> values;
  for (int i = 0; i < 50000; ++i) {
    values.push_back(std::uniform_real_distribution<double>(-3.7, 11.3)(rng));
  }
  values.push_back(-3.7);
  values.push_back(11.3);
  for (int bins : {1, 3, 7, 10, 97, 1000}) {
    const Histogram h = HistogramOf(values, bins);
    std::vector<uint64_t> want(bins, 0);
    for (double v : values) {
      int bin = -1;
      for (int i = 0; i < bins; ++i) {
        const bool last = i == bins - 1;
        if (v >= h.edges[i] && (v < h.edges[i + 1] || (last && v <= h.edges[i + 1]))) bin = i;
      }
      ASSERT_GE(bin, 0) << v;
      ++want[bin];
    }
    EXPECT_THAT(h.counts, ElementsAreArray(want)) << bins << " bins";
    EXPECT_EQ(Total(h), values.size());
  }
}

TEST(HistogramTest, HandlesEveryDType) {
  // numpy 1.24: np.histogram(np.array([-3, 7, 7, 100, -128], dtype=np.int8),
  // bins=4) -> [1, 0, 3, 1], edges [-128, -71, -14, 43, 100].
  const std::vector<int8_t> int8 = {-3, 7, 7, 100, -128};
  absl::StatusOr<Histogram> h = ComputeHistogram(DType::kInt8, BytesOf(int8), 4, std::nullopt);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_THAT(h->counts, ElementsAre(1, 0, 3, 1));
  EXPECT_THAT(h->edges, ElementsAre(-128, -71, -14, 43, 100));

  const std::string bools("\x00\x01\x01\x05", 4);
  h = ComputeHistogram(DType::kBool, bools, 2, std::nullopt);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_THAT(h->counts, ElementsAre(1, 3));

  const std::vector<uint16_t> halves = {FloatToHalf(1.0f), FloatToHalf(2.0f), 0x7e00 /* NaN */};
  h = ComputeHistogram(DType::kFloat16, BytesOf(halves), 1, std::nullopt);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_THAT(h->counts, ElementsAre(2));
  EXPECT_EQ(h->nan_count, 1u);

  const std::vector<float> floats = {0.25f, 0.75f, 0.5f};
  h = ComputeHistogram(DType::kFloat32, BytesOf(floats), 2, {{0.0, 1.0}});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_THAT(h->counts, ElementsAre(1, 2));

  const std::vector<int64_t> int64 = {std::numeric_limits<int64_t>::min(), 0,
                                      std::numeric_limits<int64_t>::max()};
  h = ComputeHistogram(DType::kInt64, BytesOf(int64), 2, std::nullopt);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_THAT(h->counts, ElementsAre(1, 2));
}

TEST(HistogramTest, RejectsBadBinCounts) {
  for (int bins : {0, -1, 1000001}) {
    absl::StatusOr<Histogram> h = ComputeHistogram(DType::kFloat32, {}, bins, std::nullopt);
    ASSERT_FALSE(h.ok()) << bins;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(h.status().message(), HasSubstr("bins must be in [1, 1000000]"));
  }
  EXPECT_TRUE(ComputeHistogram(DType::kFloat32, {}, 1000000, std::nullopt).ok());
}

TEST(HistogramTest, RejectsBadRanges) {
  for (const auto& range : std::vector<std::pair<double, double>>{
           {1.0, 1.0}, {2.0, 1.0}, {kNaN, 1.0}, {0.0, kInf}, {-kInf, 0.0}}) {
    absl::StatusOr<Histogram> h = ComputeHistogram(DType::kFloat32, {}, 3, range);
    ASSERT_FALSE(h.ok()) << range.first << ", " << range.second;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(h.status().message(), HasSubstr("finite with lo < hi"));
  }
  absl::StatusOr<Histogram> h = ComputeHistogram(DType::kFloat32, {}, 3, {{-1e308, 1e308}});
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("overflows"));
}

TEST(HistogramTest, RejectsDataThatIsNotWholeElements) {
  absl::StatusOr<Histogram> h = ComputeHistogram(DType::kInt32, std::string(6, '\0'), 3, {});
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("6 bytes"));
}

}  // namespace
}  // namespace tensorkeep
