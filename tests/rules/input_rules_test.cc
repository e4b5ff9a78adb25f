// The built-in rules on inputs and classifier outputs — ClassImbalance,
// Confusion, CheckInputImages and NLPSequenceRatio — each on data built to
// trigger it (asserting the step at which it fires) and on data built not to.
#include "gmock/gmock.h"
#include "tests/rules/rules_fixture.h"

namespace tensorkeep {
namespace {

using rules_testing::Fill;
using rules_testing::RecordSpec;
using ::testing::HasSubstr;

class InputRulesTest : public rules_testing::RulesFixture {
 protected:
  static RecordSpec Labels(uint64_t step, std::vector<double> v) {
    return {"labels", step, std::move(v), {}, 1, -1, {}, v1::INT64};
  }
  static RecordSpec Predictions(uint64_t step, std::vector<double> v,
                                std::vector<int64_t> shape = {}) {
    return {"predictions", step, std::move(v), std::move(shape), 1, -1, {}, v1::INT64};
  }
  // One-hot scores (float32) of `classes` for `labels`.
  static RecordSpec Scores(uint64_t step, const std::vector<int>& labels, int classes) {
    std::vector<double> v;
    for (int l : labels) {
      for (int c = 0; c < classes; ++c) v.push_back(c == l ? 0.9 : 0.05);
    }
    return {"predictions", step, v, {static_cast<int64_t>(labels.size()), classes}};
  }
};

// ---------------------------------------------------------------- ClassImbalance

TEST_F(InputRulesTest, ClassImbalanceFiresOnImbalancedLabelsOnceEnoughSamplesWereSeen) {
  std::vector<double> step1 = Fill(10, 0);
  step1[9] = 1;
  WriteTrial("t", {Labels(0, Fill(10, 0)), Predictions(0, Fill(10, 0)), Labels(1, step1),
                   Predictions(1, step1)});
  auto s = Run("ClassImbalance", {{"samples", "20"}}, "t");
  EXPECT_EQ(FirstIssueStep(s), 1) << "19 of class 0, 1 of class 1 after 20 samples";
  EXPECT_THAT(s.first_issue->message, HasSubstr("class imbalance"));
  EXPECT_EQ(FirstIssueStep(
                Run("ClassImbalance", {{"samples", "20"}, {"threshold_imbalance", "20"}}, "t")),
            -1);
}

TEST_F(InputRulesTest, ClassImbalanceFiresOnAMostlyMispredictedClass) {
  std::vector<double> labels = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
  WriteTrial("t", {Labels(0, labels), Predictions(0, Fill(10, 0)), Labels(1, labels),
                   Predictions(1, Fill(10, 0))});
  auto s = Run("ClassImbalance", {{"samples", "20"}}, "t");
  EXPECT_EQ(FirstIssueStep(s), 1);
  EXPECT_THAT(s.first_issue->message, HasSubstr("class 1 is mispredicted"));
}

TEST_F(InputRulesTest, ClassImbalanceStaysQuietOnBalancedWellPredictedClasses) {
  std::vector<int> labels = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0};
  std::vector<double> as_double(labels.begin(), labels.end());
  WriteTrial("t", {Labels(0, as_double), Scores(0, labels, 3), Labels(1, as_double),
                   Scores(1, labels, 3)});
  auto s = Run("ClassImbalance", {{"samples", "20"}, {"argmax", "True"}}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 2u);
}

// -------------------------------------------------------------------- Confusion

TEST_F(InputRulesTest, ConfusionFiresWhenAClassIsConfused) {
  // Step 0: scores, all right. Step 1: class indices, class 2 half wrong:
  // row 2 then holds 4 of 6 on the diagonal.
  WriteTrial("t", {Labels(0, {0, 1, 2, 0, 1, 2}), Scores(0, {0, 1, 2, 0, 1, 2}, 3),
                   Labels(1, {2, 2, 2, 2}), Predictions(1, {0, 0, 2, 2})});
  auto s = Run("Confusion", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 1);
  EXPECT_THAT(s.first_issue->message, HasSubstr("confusion[2]["));
  EXPECT_EQ(FirstIssueStep(Run("Confusion", {{"min_diag", "0.5"}, {"max_off_diag", "0.5"}}, "t")),
            -1);
}

TEST_F(InputRulesTest, ConfusionStaysQuietOnGoodPredictions) {
  WriteTrial("t", {Labels(0, {0, 1, 2, 0, 1, 2}), Scores(0, {0, 1, 2, 0, 1, 2}, 3),
                   Labels(1, {2, 1, 0}), Predictions(1, {2, 1, 0})});
  auto s = Run("Confusion", {{"category_no", "3"}}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 2u);
}

// ------------------------------------------------------------- CheckInputImages

TEST_F(InputRulesTest, CheckInputImagesFiresOnUnnormalisedImagesAfterEnoughSamples) {
  // 4 images (NCHW 4x3x2x2) per step; judged from 8 images on.
  WriteTrial("t", {{"hybridsequential0_input_0", 0, Fill(48, 128), {4, 3, 2, 2}},
                   {"hybridsequential0_input_0", 1, Fill(48, 128), {4, 3, 2, 2}}});
  auto s = Run("CheckInputImages", {{"threshold_samples", "8"}}, "t");
  EXPECT_EQ(FirstIssueStep(s), 1);
  EXPECT_THAT(s.first_issue->message, HasSubstr("not normalised"));
}

TEST_F(InputRulesTest, CheckInputImagesStaysQuietOnNormalisedImages) {
  std::vector<double> normalised;
  for (int i = 0; i < 48; ++i) normalised.push_back(i % 2 == 0 ? 1.0 : -1.0);
  WriteTrial("t", {{"hybridsequential0_input_0", 0, normalised, {4, 3, 2, 2}},
                   {"hybridsequential0_input_0", 1, normalised, {4, 3, 2, 2}}});
  EXPECT_EQ(FirstIssueStep(Run("CheckInputImages", {{"threshold_samples", "8"}}, "t")), -1);
}

TEST_F(InputRulesTest, CheckInputImagesLooksAtTheGivenChannelAxis) {
  // NHWC 4x2x2x3: channel 2 has mean 0.5, the others 0.
  std::vector<double> v;
  for (int i = 0; i < 48; ++i) v.push_back(i % 3 == 2 ? 0.5 : 0.0);
  WriteTrial("t", {{"images", 0, v, {4, 2, 2, 3}}});
  EXPECT_EQ(
      FirstIssueStep(Run("CheckInputImages",
                         {{"regex", "images"}, {"threshold_samples", "4"}, {"channel", "3"}}, "t")),
      0);
  EXPECT_EQ(FirstIssueStep(
                Run("CheckInputImages", {{"regex", "images"}, {"threshold_samples", "4"}}, "t")),
            -1)
      << "along axis 1 every slice mixes the channels: mean 0.5 / 3";
}

// ------------------------------------------------------------- NLPSequenceRatio

TEST_F(InputRulesTest, NLPSequenceRatioFiresWhenPaddingDominates) {
  std::vector<double> light = {5, 6, 7, 8, 9, 10, 11, 0, 0, 0};  // 30 % padding
  std::vector<double> heavy = {5, 6, 7, 0, 0, 0, 0, 0, 0, 0};    // 70 %
  WriteTrial("t", {{"model_embedding0_input_0", 0, light, {1, 10}, 1, -1, {}, v1::INT64},
                   {"model_embedding0_input_0", 1, heavy, {1, 10}, 1, -1, {}, v1::INT64}});
  auto s = Run("NLPSequenceRatio", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 1);
  EXPECT_THAT(s.first_issue->message, HasSubstr("is token 0"));
  EXPECT_EQ(
      FirstIssueStep(Run("NLPSequenceRatio",
                         {{"token_values", "0, 7"}, {"token_thresholds_percent", "80, 5"}}, "t")),
      0)
      << "token 7 makes up 10 % of step 0";
}

TEST_F(InputRulesTest, NLPSequenceRatioStaysQuietOnShortPadding) {
  std::vector<double> light = {5, 6, 7, 8, 9, 10, 11, 0, 0, 0};
  WriteTrial("t", {{"model_embedding0_input_0", 0, light, {1, 10}, 1, -1, {}, v1::INT64},
                   {"model_embedding0_input_0", 1, light, {1, 10}, 1, -1, {}, v1::INT64}});
  auto s = Run("NLPSequenceRatio", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 2u);
}

}  // namespace
}  // namespace tensorkeep
