// The value math rules use on raw values: numpy's allclose and percentile,
// conversion of stored values, class indices.
#include "rules/value_math.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensorkeep {
namespace rules {
namespace {

using ::testing::ElementsAre;

client::Value Float32Value(const std::vector<float>& v, std::vector<int64_t> shape) {
  client::Value value;
  value.dtype = 2;  // float32
  value.shape = std::move(shape);
  value.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return value;
}

TEST(ValueMathTest, AllCloseFollowsNumpy) {
  EXPECT_TRUE(AllClose({1.0, 2.0}, {1.0 + 1e-9, 2.0}, 1e-5, 1e-8, false));
  EXPECT_FALSE(AllClose({1.0}, {1.1}, 1e-5, 1e-8, false));
  EXPECT_TRUE(AllClose({100.0}, {100.0009}, 1e-5, 1e-8, false)) << "rtol is relative to b";
  EXPECT_FALSE(AllClose({1.0}, {1.0, 1.0}, 1e-5, 1e-8, false)) << "sizes differ";
  double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(AllClose({nan}, {nan}, 1e-5, 1e-8, false));
  EXPECT_TRUE(AllClose({nan}, {nan}, 1e-5, 1e-8, true));
  EXPECT_TRUE(AllClose({inf}, {inf}, 1e-5, 1e-8, false));
  EXPECT_FALSE(AllClose({inf}, {-inf}, 1e-5, 1e-8, false));
}

TEST(ValueMathTest, PercentileInterpolatesLinearlyAsNumpy) {
  std::vector<double> v = {4, 1, 3, 2, 5};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 3);
  v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  v = {0, 10};
  EXPECT_DOUBLE_EQ(Percentile(v, 5), 0.5);
  v = {0, 10};
  EXPECT_DOUBLE_EQ(Percentile(v, 95), 9.5);
  v = {};
  EXPECT_TRUE(std::isnan(Percentile(v, 50)));
}

TEST(ValueMathTest, ConvertsStoredValuesToDoubles) {
  auto d = ToDoubles(Float32Value({1.5f, -2.0f}, {2}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(*d, ElementsAre(1.5, -2.0));
  EXPECT_FALSE(ToDoubles(Float32Value({1.5f}, {2})).ok()) << "bytes do not hold the shape";
}

TEST(ValueMathTest, ClassIndicesTakeArgmaxAlongTheLastAxis) {
  auto v = Float32Value({0.1f, 0.7f, 0.2f, 0.9f, 0.05f, 0.05f}, {2, 3});
  EXPECT_THAT(*ClassIndices(v, /*argmax=*/true), ElementsAre(1, 0));
  EXPECT_THAT(*ClassIndices(Float32Value({2.0f, 0.0f, 1.0f}, {3}), false), ElementsAre(2, 0, 1));
}

TEST(ValueMathTest, NormsOfDifferences) {
  EXPECT_DOUBLE_EQ(L2Norm({3, 4}), 5);
  EXPECT_DOUBLE_EQ(L2Distance({1, 1}, {4, 5}), 5);
}

}  // namespace
}  // namespace rules
}  // namespace tensorkeep
