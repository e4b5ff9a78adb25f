// The built-in rules on activations and initialisation — SaturatedActivation,
// DeadRelu and PoorWeightInitialization — each on data built to trigger it
// (asserting the step at which it fires) and on data built not to.
#include "gmock/gmock.h"
#include "tests/rules/rules_fixture.h"

namespace tensorkeep {
namespace {

using rules_testing::Fill;
using rules_testing::Linspace;
using rules_testing::RecordSpec;
using ::testing::HasSubstr;

class ActivationRulesTest : public rules_testing::RulesFixture {};

// ---------------------------------------------------------- SaturatedActivation

TEST_F(ActivationRulesTest, SaturatedActivationFiresWhenMostLayersSaturate) {
  // Step 0 healthy; step 1 the tanh layer saturates (1 of 2 layers: not more
  // than 50 %); step 2 both do.
  std::vector<double> saturated_tanh = Linspace(-20, 20, 100);    // most |x| > 9.5
  std::vector<double> saturated_sigmoid = Linspace(20, 40, 100);  // all > 17
  WriteTrial("t", {{"layer1_tanh_input", 0, Linspace(-2, 2, 100)},
                   {"layer2_sigmoid_input", 0, Linspace(-5, 5, 100)},
                   {"layer1_tanh_input", 1, saturated_tanh},
                   {"layer2_sigmoid_input", 1, Linspace(-5, 5, 100)},
                   {"layer1_tanh_input", 2, saturated_tanh},
                   {"layer2_sigmoid_input", 2, saturated_sigmoid}});
  auto s = Run("SaturatedActivation", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 2);
  EXPECT_THAT(s.first_issue->message, HasSubstr("2 of 2 activation layers saturated"));
  EXPECT_EQ(FirstIssueStep(Run("SaturatedActivation", {{"threshold_layer", "40"}}, "t")), 1);
}

TEST_F(ActivationRulesTest, SaturatedActivationStaysQuietInTheLinearRange) {
  WriteTrial("t", {{"layer1_tanh_input", 0, Linspace(-9, 9, 100)},
                   {"layer2_sigmoid_input", 0, Linspace(-20, 16, 100)},
                   {"layer1_tanh_input", 1, Linspace(-3, 3, 100)},
                   {"layer2_sigmoid_input", 1, Linspace(-3, 3, 100)}});
  auto s = Run("SaturatedActivation", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 2u);
  EXPECT_EQ(FirstIssueStep(Run("SaturatedActivation",
                               {{"threshold_tanh", "(-1, 1)"}, {"threshold_layer", "0"}}, "t")),
            0)
      << "a narrower range makes the same inputs saturated";
}

// --------------------------------------------------------------------- DeadRelu

TEST_F(ActivationRulesTest, DeadReluFiresWhenMostReluLayersAreDead) {
  std::vector<double> healthy = Linspace(-1, 1, 100);  // half > 0
  std::vector<double> dead = Fill(100, 0.0);
  WriteTrial("t", {{"layer1_relu_output", 0, healthy},
                   {"layer2_relu_output", 0, healthy},
                   {"layer1_relu_output", 1, dead},
                   {"layer2_relu_output", 1, healthy},
                   {"layer1_relu_output", 2, dead},
                   {"layer2_relu_output", 2, dead}});
  auto s = Run("DeadRelu", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 2) << "at step 1 only half the layers are dead";
  EXPECT_THAT(s.first_issue->message, HasSubstr("2 of 2 ReLU layers dead"));
}

TEST_F(ActivationRulesTest, DeadReluStaysQuietWhileReluLayersAreActive) {
  std::vector<double> sparse = Fill(100, 0.0);
  sparse[0] = sparse[1] = 0.5;  // 2 % active: more than threshold_inactivity (1 %)
  WriteTrial("t", {{"layer1_relu_output", 0, Linspace(-1, 1, 100)},
                   {"layer2_relu_output", 0, sparse},
                   {"layer1_relu_output", 1, sparse},
                   {"layer2_relu_output", 1, sparse}});
  EXPECT_EQ(FirstIssueStep(Run("DeadRelu", {}, "t")), -1);
  EXPECT_EQ(FirstIssueStep(Run("DeadRelu", {{"threshold_inactivity", "5"}}, "t")), 1);
}

// ----------------------------------------------------- PoorWeightInitialization

TEST_F(ActivationRulesTest, PoorWeightInitializationFiresOnVarianceRatioAcrossLayers) {
  WriteTrial("t", {{"layer1_relu_input", 0, Linspace(-1, 1, 50)},
                   {"layer2_relu_input", 0, Linspace(-2, 2, 50)},
                   {"layer1_relu_input", 1, Linspace(-1, 1, 50)},
                   {"layer2_relu_input", 1, Linspace(-100, 100, 50)}});
  auto s = Run("PoorWeightInitialization", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 1);
  EXPECT_THAT(s.first_issue->message, HasSubstr("activation inputs vary"));
}

TEST_F(ActivationRulesTest, PoorWeightInitializationFiresOnNarrowGradients) {
  WriteTrial("t",
             {{"gradient/fc1.weight", 0, Linspace(-1, 1, 50), {}, 1, -1, {"gradients"}},
              {"gradient/fc1.weight", 1, Linspace(-1e-5, 1e-5, 50), {}, 1, -1, {"gradients"}},
              {"gradient/fc2.weight", 1, Linspace(-1e-5, 1e-5, 50), {}, 1, -1, {"gradients"}}});
  auto s = Run("PoorWeightInitialization", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 1);
  EXPECT_THAT(s.first_issue->message, HasSubstr("distribution_range"));
}

TEST_F(ActivationRulesTest, PoorWeightInitializationFiresOnALossThatDoesNotDecrease) {
  std::vector<RecordSpec> records;
  for (uint64_t step = 0; step < 10; ++step) {
    records.push_back({"loss", step, {step < 2 ? 3.0 - step : 2.0}, {}, 1, -1, {"losses"}});
  }
  WriteTrial("t", records);
  auto s = Run("PoorWeightInitialization", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), 6) << "lowest at step 1, then 5 steps without a new minimum";
}

TEST_F(ActivationRulesTest, PoorWeightInitializationStaysQuietOnAGoodStartAndLooksOnlyAtIt) {
  std::vector<RecordSpec> records;
  for (uint64_t step = 0; step < 12; ++step) {
    records.push_back({"layer1_relu_input", step, Linspace(-1, 1, 50)});
    records.push_back({"layer2_relu_input", step, Linspace(-2, 2, 50)});
    records.push_back(
        {"gradient/fc1.weight", step, Linspace(-0.1, 0.1, 50), {}, 1, -1, {"gradients"}});
    // The loss decreases during the first 10 steps, then stays flat.
    records.push_back({"loss", step, {step < 10 ? 10.0 - step : 1.0}, {}, 1, -1, {"losses"}});
  }
  // After the first 10 steps, even a bad variance ratio is not looked at.
  records.push_back({"layer1_relu_input", 12, Linspace(-1, 1, 50)});
  records.push_back({"layer2_relu_input", 12, Linspace(-100, 100, 50)});
  WriteTrial("t", records);
  auto s = Run("PoorWeightInitialization", {}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.steps_evaluated, 10u);
  EXPECT_EQ(s.steps_skipped, 3u);
}

}  // namespace
}  // namespace tensorkeep
