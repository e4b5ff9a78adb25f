// The built-in rules on losses — LossNotDecreasing, Overfit and Overtraining
// — each on data built to trigger it (asserting the step at which it fires)
// and on data built not to.
#include <functional>

#include "gmock/gmock.h"
#include "tests/rules/rules_fixture.h"

namespace tensorkeep {
namespace {

using rules_testing::RecordSpec;
using ::testing::HasSubstr;

class LossRulesTest : public rules_testing::RulesFixture {
 protected:
  // A loss saved at TRAIN steps 0..n-1 (global == mode step).
  void WriteTrainLosses(const std::string& trial, int n, const std::function<double(int)>& loss) {
    std::vector<RecordSpec> records;
    for (int s = 0; s < n; ++s) {
      records.push_back({"loss", static_cast<uint64_t>(s), {loss(s)}, {}, 1, -1, {"losses"}});
    }
    WriteTrial(trial, records);
  }
  // n rounds of one TRAIN step (global 2i, mode step i) and one EVAL step
  // (global 2i + 1, mode step i).
  void WriteTrainEval(const std::string& trial, int n, const std::function<double(int)>& train,
                      const std::function<double(int)>& eval) {
    std::vector<RecordSpec> records;
    for (int i = 0; i < n; ++i) {
      records.push_back({"loss", 2u * i, {train(i)}, {}, 1, i, {"losses"}});
      records.push_back({"loss", 2u * i + 1, {eval(i)}, {}, 2, i, {"losses"}});
    }
    WriteTrial(trial, records);
  }
};

// ------------------------------------------------------------ LossNotDecreasing

TEST_F(LossRulesTest, LossNotDecreasingFiresWhenTheLossRisesOverNumSteps) {
  // 20, 19, ..., 6 for steps 0..14, then 8, 10, 12, ...: step 18 has 14 > 12
  // (the loss at step 8) — the first step above its value 10 steps before.
  WriteTrainLosses("t", 25, [](int s) { return s < 15 ? 20.0 - s : 6.0 + 2 * (s - 14); });
  auto s = Run("LossNotDecreasing", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 18);
  EXPECT_THAT(s.first_issue->message, HasSubstr("loss did not decrease"));
  EXPECT_EQ(s.steps_skipped, 10u) << "steps 0..9 have no loss 10 steps before";
}

TEST_F(LossRulesTest, LossNotDecreasingStaysQuietWhileTheLossDecreases) {
  WriteTrainLosses("t", 25, [](int s) { return 100.0 - 0.05 * s; });
  EXPECT_EQ(FirstIssueStep(Run("LossNotDecreasing", {}, "t")), -1);
  // Decreasing by 0.5 per 10 steps is less than 1 %.
  EXPECT_EQ(FirstIssueStep(Run("LossNotDecreasing", {{"diff_percent", "1"}}, "t")), 10);
  EXPECT_EQ(
      FirstIssueStep(Run("LossNotDecreasing", {{"num_steps", "20"}, {"diff_percent", "1"}}, "t")),
      -1);
}

TEST_F(LossRulesTest, LossNotDecreasingPrefersEvalStepsUnlessTheModeIsGiven) {
  // The training loss rises, the evaluation loss falls.
  WriteTrainEval(
      "t", 15, [](int i) { return 1.0 + i; }, [](int i) { return 100.0 - i; });
  auto by_default = Run("LossNotDecreasing", {}, "t");
  EXPECT_EQ(FirstIssueStep(by_default), -1);
  EXPECT_EQ(by_default.steps_evaluated, 5u) << "EVAL mode steps 10..14";
  EXPECT_EQ(FirstIssueStep(Run("LossNotDecreasing", {{"mode", "TRAIN"}}, "t")), 20)
      << "TRAIN mode step 10 is global step 20";
}

TEST_F(LossRulesTest, LossNotDecreasingReadsTheLossesNamedByRegex) {
  std::vector<RecordSpec> records;
  for (int s = 0; s < 12; ++s) {
    records.push_back({"my_loss", static_cast<uint64_t>(s), {1.0 + s}});
  }
  WriteTrial("t", records);
  EXPECT_EQ(
      FirstIssueStep(Run("LossNotDecreasing",
                         {{"tensor_regex", "my_loss"}, {"use_losses_collection", "False"}}, "t")),
      10);
}

// ---------------------------------------------------------------------- Overfit

TEST_F(LossRulesTest, OverfitFiresWhenValidationLossRunsAway) {
  // Evaluations at global steps 1, 3, 5, 7, 9 with ratios .05, .5, .05, .5, .5.
  std::vector<double> eval = {1.05, 1.5, 1.05, 1.5, 1.5};
  WriteTrainEval(
      "t", 5, [](int) { return 1.0; }, [&](int i) { return eval[i]; });
  auto s = Run("Overfit", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 3);
  EXPECT_THAT(s.first_issue->message, HasSubstr("overfits"));
  EXPECT_EQ(FirstIssueStep(Run("Overfit", {{"patience", "2"}}, "t")), 9);
  EXPECT_EQ(FirstIssueStep(Run("Overfit", {{"start_step", "4"}}, "t")), 7);
}

TEST_F(LossRulesTest, OverfitStaysQuietWhileValidationFollowsTraining) {
  WriteTrainEval(
      "t", 5, [](int i) { return 2.0 - 0.1 * i; }, [](int i) { return 2.1 - 0.1 * i; });
  auto s = Run("Overfit", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 10u);
}

// ----------------------------------------------------------------- Overtraining

TEST_F(LossRulesTest, OvertrainingFiresWhenNeitherLossImprovesAnyMore) {
  // Both flat: the training loss has gone 5 steps without improving from
  // TRAIN mode step 5 on, the validation loss 10 steps at EVAL mode step 10
  // (global 21).
  WriteTrainEval(
      "t", 15, [](int) { return 1.0; }, [](int) { return 1.0; });
  auto s = Run("Overtraining", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 21);
  EXPECT_THAT(s.first_issue->message, HasSubstr("stopped improving"));
  EXPECT_EQ(FirstIssueStep(
                Run("Overtraining", {{"patience_train", "2"}, {"patience_validation", "2"}}, "t")),
            5);
}

TEST_F(LossRulesTest, OvertrainingStaysQuietWhileEitherLossImproves) {
  // The validation loss is flat, but the training loss keeps improving by
  // more than delta.
  WriteTrainEval(
      "t", 15, [](int i) { return 10.0 - 0.5 * i; }, [](int) { return 1.0; });
  EXPECT_EQ(FirstIssueStep(Run("Overtraining", {}, "t")), -1);
  // With a larger delta, the training loss's improvements no longer count.
  EXPECT_EQ(FirstIssueStep(Run("Overtraining", {{"delta", "5"}}, "t")), 21);
}

}  // namespace
}  // namespace tensorkeep
