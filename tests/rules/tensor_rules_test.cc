// The built-in rules on tensor values — VanishingGradient, ExplodingTensor,
// AllZero, UnchangedTensor, TensorVariance, WeightUpdateRatio and
// SimilarAcrossRuns — each on data built to trigger it (asserting the step
// at which it fires) and on data built not to.
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "tests/rules/rules_fixture.h"

namespace tensorkeep {
namespace {

using rules_testing::Fill;
using rules_testing::Linspace;
using rules_testing::RecordSpec;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

class TensorRulesTest : public rules_testing::RulesFixture {};

// ------------------------------------------------------------ VanishingGradient

TEST_F(TensorRulesTest, VanishingGradientFiresWhenAGradientMeanFallsBelowThreshold) {
  WriteTrial("t", {{"gradient/fc1.weight", 0, Fill(8, 1e-3), {}, 1, -1, {"gradients"}},
                   {"gradient/fc2.weight", 0, Fill(8, -1e-3), {}, 1, -1, {"gradients"}},
                   {"loss", 1, {0.5}, {}, 1, -1, {"losses"}},
                   {"gradient/fc1.weight", 2, Fill(8, 1e-3), {}, 1, -1, {"gradients"}},
                   {"gradient/fc2.weight", 2, Fill(8, -1e-9), {}, 1, -1, {"gradients"}}});
  auto s = Run("VanishingGradient", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 2);
  EXPECT_THAT(s.first_issue->message, HasSubstr("gradient/fc2.weight"));
  EXPECT_EQ(s.steps_skipped, 1u) << "step 1 saved no gradient";
}

TEST_F(TensorRulesTest, VanishingGradientStaysQuietOnHealthyGradients) {
  WriteTrial("t", {{"gradient/fc1.weight", 0, Fill(8, 1e-3), {}, 1, -1, {"gradients"}},
                   {"gradient/fc1.weight", 1, Linspace(-1, 1, 8), {}, 1, -1, {"gradients"}}});
  auto s = Run("VanishingGradient", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 2u);
}

TEST_F(TensorRulesTest, VanishingGradientThresholdIsAParameter) {
  WriteTrial("t", {{"gradient/w", 0, Fill(8, 1e-3), {}, 1, -1, {"gradients"}}});
  EXPECT_EQ(FirstIssueStep(Run("VanishingGradient", {{"threshold", "0.01"}}, "t")), 0);
}

// -------------------------------------------------------------- ExplodingTensor

TEST_F(TensorRulesTest, ExplodingTensorFiresOnInfinityThenOnlyNanOnNan) {
  WriteTrial("t", {{"w", 0, {1, 2}}, {"w", 1, {1, kInf}}, {"w", 2, {std::nan(""), 1}}});
  EXPECT_EQ(FirstIssueStep(Run("ExplodingTensor", {}, "t")), 1);
  auto nan_only = Run("ExplodingTensor", {{"only_nan", "True"}}, "t");
  EXPECT_EQ(FirstIssueStep(nan_only), 2);
  EXPECT_THAT(nan_only.first_issue->message, HasSubstr("NaN"));
}

TEST_F(TensorRulesTest, ExplodingTensorStaysQuietOnFiniteValuesAndUnselectedTensors) {
  WriteTrial("t", {{"w", 0, {1, 2}, {}, 1, -1, {"weights"}},
                   {"w", 1, {1e30, -1e30}, {}, 1, -1, {"weights"}},
                   {"debug", 1, {std::nan("")}, {}, 1, -1, {"other"}}});
  EXPECT_EQ(FirstIssueStep(Run("ExplodingTensor", {{"collection_names", "weights"}}, "t")), -1);
  EXPECT_EQ(FirstIssueStep(Run("ExplodingTensor", {{"tensor_regex", "w"}}, "t")), -1);
  EXPECT_EQ(FirstIssueStep(Run("ExplodingTensor", {}, "t")), 1) << "all tensors by default";
}

// ---------------------------------------------------------------------- AllZero

TEST_F(TensorRulesTest, AllZeroFiresWhenEveryValueIsZero) {
  WriteTrial("t", {{"w", 0, {1, 0, 0, 0}, {}, 1, -1, {"weights"}},
                   {"w", 1, {0, 0, 0, 0}, {}, 1, -1, {"weights"}}});
  EXPECT_EQ(FirstIssueStep(Run("AllZero", {{"collection_names", "weights"}}, "t")), 1);
  EXPECT_EQ(FirstIssueStep(Run("AllZero", {{"tensor_regex", "w"}, {"threshold", "75"}}, "t")), 0);
}

TEST_F(TensorRulesTest, AllZeroStaysQuietWhileSomeValuesAreNonZero) {
  WriteTrial("t", {{"w", 0, {1, 0, 0, 0}, {}, 1, -1, {"weights"}},
                   {"w", 1, {0, 0, 0, -1}, {}, 1, -1, {"weights"}}});
  EXPECT_EQ(FirstIssueStep(Run("AllZero", {{"collection_names", "weights"}}, "t")), -1);
  EXPECT_EQ(FirstIssueStep(Run("AllZero", {{"tensor_regex", "w"}, {"threshold", "80"}}, "t")), -1);
}

// -------------------------------------------------------------- UnchangedTensor

TEST_F(TensorRulesTest, UnchangedTensorFiresWhenValuesStayTheSameOverNumSteps) {
  WriteTrial("t", {{"w", 0, {1, 2}},
                   {"w", 1, {3, 4}},
                   {"w", 2, {3, 4}},
                   {"w", 3, {3, 4 + 1e-9}},
                   {"w", 4, {5, 6}}});
  auto s = Run("UnchangedTensor", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 3) << "steps 1, 2, 3 are allclose";
  EXPECT_THAT(s.issue_steps, ElementsAre(3));
  EXPECT_EQ(FirstIssueStep(Run("UnchangedTensor", {{"num_steps", "2"}}, "t")), 2);
}

TEST_F(TensorRulesTest, UnchangedTensorStaysQuietWhileValuesChange) {
  WriteTrial("t", {{"w", 0, {1, 2}}, {"w", 1, {1.1, 2}}, {"w", 2, {1.2, 2}}, {"w", 3, {1.3, 2}}});
  auto s = Run("UnchangedTensor", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_skipped, 2u) << "steps 0 and 1 have fewer than num_steps saved steps";
  EXPECT_EQ(FirstIssueStep(Run("UnchangedTensor", {{"atol", "0.5"}}, "t")), 2)
      << "with a large tolerance the changes do not count";
}

// --------------------------------------------------------------- TensorVariance

TEST_F(TensorRulesTest, TensorVarianceFiresOutsideTheGivenRange) {
  WriteTrial("t", {{"w", 0, {-1, 1}}, {"w", 1, {-1, 1}}, {"w", 2, {-10, 10}}, {"w", 3, {2, 2}}});
  EXPECT_EQ(FirstIssueStep(Run("TensorVariance", {{"max_threshold", "10"}}, "t")), 2);
  auto low = Run("TensorVariance", {{"min_threshold", "0.5"}}, "t");
  EXPECT_EQ(FirstIssueStep(low), 3);
  EXPECT_THAT(low.first_issue->message, HasSubstr("< min_threshold"));
}

TEST_F(TensorRulesTest, TensorVarianceStaysQuietInsideTheRange) {
  WriteTrial("t", {{"w", 0, {-1, 1}}, {"w", 1, {-2, 2}}});
  EXPECT_EQ(FirstIssueStep(
                Run("TensorVariance", {{"max_threshold", "10"}, {"min_threshold", "0.5"}}, "t")),
            -1);
}

// ------------------------------------------------------------ WeightUpdateRatio

TEST_F(TensorRulesTest, WeightUpdateRatioFiresOnAFrozenWeight) {
  WriteTrial("t", {{"fc.weight", 0, {1, 2, 3}, {}, 1, -1, {"weights"}},
                   {"fc.weight", 1, {1.01, 2, 3}, {}, 1, -1, {"weights"}},
                   {"fc.weight", 2, {1.01, 2, 3}, {}, 1, -1, {"weights"}}});
  auto s = Run("WeightUpdateRatio", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 2);
  EXPECT_THAT(s.first_issue->message, HasSubstr("small_threshold"));
  EXPECT_EQ(s.steps_skipped, 1u) << "step 0 has nothing to compare with";
}

TEST_F(TensorRulesTest, WeightUpdateRatioFiresOnAHugeUpdate) {
  WriteTrial("t", {{"fc.weight", 0, {1, 2, 3}, {}, 1, -1, {"weights"}},
                   {"fc.weight", 1, {1.01, 2, 3}, {}, 1, -1, {"weights"}},
                   {"fc.weight", 2, {100, 200, 300}, {}, 1, -1, {"weights"}}});
  auto s = Run("WeightUpdateRatio", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 2);
  EXPECT_THAT(s.first_issue->message, HasSubstr("large_threshold"));
}

TEST_F(TensorRulesTest, WeightUpdateRatioStaysQuietOnSteadyUpdatesAndEvalSteps) {
  WriteTrial("t", {{"fc.weight", 0, {1, 2, 3}, {}, 1, 0, {"weights"}},
                   {"fc.weight", 1, {1.01, 2, 3}, {}, 1, 1, {"weights"}},
                   {"fc.weight", 2, {1.01, 2, 3}, {}, 2, 0, {"weights"}},  // EVAL
                   {"fc.weight", 3, {1.02, 2, 3}, {}, 1, 2, {"weights"}}});
  auto s = Run("WeightUpdateRatio", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 2u);
}

// ------------------------------------------------------------ SimilarAcrossRuns

TEST_F(TensorRulesTest, SimilarAcrossRunsFiresWhereTheTrialsDiffer) {
  WriteTrial("a", {{"w", 0, {1, 2}}, {"w", 1, {3, 4}}, {"w", 2, {5, 6}}, {"only_a", 2, {1}}});
  WriteTrial("b", {{"w", 0, {1, 2}}, {"w", 1, {3, 4}}, {"w", 2, {5, 6.5}}});
  auto s = Run("SimilarAcrossRuns", {}, "a", {"b"});
  EXPECT_EQ(FirstIssueStep(s), 2);
  EXPECT_THAT(s.first_issue->message, HasSubstr("differs between trials a and b"));
  EXPECT_EQ(FirstIssueStep(Run("SimilarAcrossRuns", {{"other_trial", "b"}}, "a")), 2);
}

TEST_F(TensorRulesTest, SimilarAcrossRunsStaysQuietOnIdenticalRuns) {
  WriteTrial("a", {{"w", 0, {1, 2}}, {"w", 1, {3, 4}}, {"only_a", 1, {7}}});
  WriteTrial("b", {{"w", 0, {1, 2}}, {"w", 1, {3, 4 + 1e-9}}});
  auto s = Run("SimilarAcrossRuns", {}, "a", {"b"});
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 2u);
}

}  // namespace
}  // namespace tensorkeep
