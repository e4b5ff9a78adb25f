// RuleParams and the registry's parameter checks: every parameter is a
// string; unknown names and unparsable values are InvalidArgument naming the
// parameter. No collector needed (a Connection connects lazily).
#include "rules/params.h"

#include <cmath>

#include "client/connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/registry.h"

namespace tensorkeep {
namespace rules {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RuleParamsTest, ReturnsDefaultsForAbsentParameters) {
  RuleParams p("R", {});
  EXPECT_EQ(*p.Double("threshold", 1e-7), 1e-7);
  EXPECT_EQ(*p.Int("num_steps", 3), 3);
  EXPECT_TRUE(*p.Bool("flag", true));
  EXPECT_FALSE(p.OptionalDouble("max").value().has_value());
  EXPECT_THAT(p.List("regex", {"a"}), ElementsAre("a"));
  EXPECT_TRUE(p.Finish().ok());
}

TEST(RuleParamsTest, ParsesPythonStyleStrings) {
  RuleParams p("R", {{"b1", "True"},
                     {"b2", "false"},
                     {"d", " 2.5e-3 "},
                     {"i", "42"},
                     {"none", "None"},
                     {"list", ".*a, .*b ,"},
                     {"range", "(-9.5, 9.5)"},
                     {"nums", "0, 1,2"}});
  EXPECT_TRUE(*p.Bool("b1", false));
  EXPECT_FALSE(*p.Bool("b2", true));
  EXPECT_DOUBLE_EQ(*p.Double("d", 0), 2.5e-3);
  EXPECT_EQ(*p.Int("i", 0), 42);
  EXPECT_FALSE(p.OptionalInt("none").value().has_value());
  EXPECT_THAT(p.List("list"), ElementsAre(".*a", ".*b"));
  EXPECT_EQ(*p.Range("range", {0, 1}), std::make_pair(-9.5, 9.5));
  EXPECT_THAT(*p.DoubleList("nums", {}), ElementsAre(0, 1, 2));
  EXPECT_TRUE(p.Finish().ok());
}

TEST(RuleParamsTest, RejectsUnparsableValuesNamingTheParameter) {
  RuleParams p("VanishingGradient", {{"threshold", "tiny"}, {"n", "3.5"}, {"b", "maybe"}});
  absl::Status s = p.Double("threshold", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("threshold"));
  EXPECT_THAT(s.message(), HasSubstr("VanishingGradient"));
  EXPECT_THAT(p.Int("n", 0).status().message(), HasSubstr("n '3.5'"));
  EXPECT_FALSE(p.Bool("b", false).ok());
}

TEST(RuleParamsTest, RejectsBadRangesAndRegexes) {
  RuleParams p("R", {{"r1", "(1, 0)"}, {"r2", "1"}, {"re", "a(("}});
  EXPECT_FALSE(p.Range("r1", {0, 1}).ok());
  EXPECT_FALSE(p.Range("r2", {0, 1}).ok());
  EXPECT_THAT(p.Regexes("re").status().message(), HasSubstr("invalid regex"));
}

TEST(RuleParamsTest, FinishNamesUnknownParameters) {
  RuleParams p("R", {{"threshold", "1"}, {"treshold", "2"}});
  ASSERT_TRUE(p.Double("threshold", 0).ok());
  absl::Status s = p.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("treshold"));
  EXPECT_THAT(s.message(), HasSubstr("known: threshold"));
}

TEST(RuleParamsTest, ParsesAssignments) {
  EXPECT_EQ(*ParseParamAssignment("a=b=c"), std::make_pair(std::string("a"), std::string("b=c")));
  EXPECT_EQ(*ParseParamAssignment("k="), std::make_pair(std::string("k"), std::string("")));
  EXPECT_FALSE(ParseParamAssignment("novalue").ok());
  EXPECT_FALSE(ParseParamAssignment("=v").ok());
}

class RegistryTest : public ::testing::Test {
 protected:
  client::Trial Trial() {
    auto c = Connection::Open("127.0.0.1:1");
    EXPECT_TRUE(c.ok());
    return client::Trial(*c, "t");
  }
};

TEST_F(RegistryTest, ListsEveryBuiltinRule) {
  std::vector<std::string> names;
  for (const auto& r : BuiltinRules()) names.push_back(r.name);
  EXPECT_THAT(names,
              ElementsAre("AllZero", "CheckInputImages", "ClassImbalance", "Confusion", "DeadRelu",
                          "ExplodingTensor", "LossNotDecreasing", "NLPSequenceRatio", "Overfit",
                          "Overtraining", "PoorWeightInitialization", "SaturatedActivation",
                          "SimilarAcrossRuns", "StalledTrainingRule", "TensorVariance",
                          "UnchangedTensor", "VanishingGradient", "WeightUpdateRatio"));
}

TEST_F(RegistryTest, CreatesEveryRuleWithItsDefaults) {
  for (const auto& r : BuiltinRules()) {
    std::map<std::string, std::string> params;
    std::vector<client::Trial> others;
    // The rules with a required parameter.
    if (r.name == "AllZero") params["collection_names"] = "weights";
    if (r.name == "TensorVariance") params["max_threshold"] = "10";
    if (r.name == "SimilarAcrossRuns") others.push_back(client::Trial(Trial().connection(), "u"));
    auto rule = CreateRule(r.name, params, Trial(), others);
    EXPECT_TRUE(rule.ok()) << r.name << ": " << rule.status();
    if (rule.ok()) EXPECT_EQ((*rule)->name(), r.name);
  }
}

TEST_F(RegistryTest, UnknownRuleListsTheKnownNames) {
  auto rule = CreateRule("VanishingGradients", {}, Trial());
  EXPECT_EQ(rule.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(rule.status().message(), HasSubstr("VanishingGradients"));
  EXPECT_THAT(rule.status().message(), HasSubstr("VanishingGradient, WeightUpdateRatio"));
}

TEST_F(RegistryTest, UnknownParameterIsInvalidArgumentNamingIt) {
  auto rule = CreateRule("VanishingGradient", {{"threshhold", "1"}}, Trial());
  EXPECT_EQ(rule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rule.status().message(), HasSubstr("threshhold"));
}

TEST_F(RegistryTest, UnparsableValueIsInvalidArgumentNamingTheParameter) {
  auto rule = CreateRule("LossNotDecreasing", {{"num_steps", "ten"}}, Trial());
  EXPECT_EQ(rule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rule.status().message(), HasSubstr("num_steps"));
  auto mode = CreateRule("LossNotDecreasing", {{"mode", "VALIDATION"}}, Trial());
  EXPECT_THAT(mode.status().message(), HasSubstr("mode"));
}

TEST_F(RegistryTest, RejectsMissingRequiredParameters) {
  EXPECT_THAT(CreateRule("AllZero", {}, Trial()).status().message(), HasSubstr("collection_names"));
  EXPECT_THAT(CreateRule("TensorVariance", {}, Trial()).status().message(),
              HasSubstr("max_threshold"));
  EXPECT_THAT(CreateRule("SimilarAcrossRuns", {}, Trial()).status().message(),
              HasSubstr("other_trial"));
}

TEST_F(RegistryTest, SimilarAcrossRunsTakesTheOtherTrialAsAParameter) {
  auto rule = CreateRule("SimilarAcrossRuns", {{"other_trial", "u"}}, Trial());
  ASSERT_TRUE(rule.ok()) << rule.status();
  ASSERT_EQ((*rule)->other_trials().size(), 1u);
  EXPECT_EQ((*rule)->other_trials()[0].name(), "u");
}

TEST_F(RegistryTest, StalledTrainingRuleCanAskToStopTraining) {
  auto quiet = CreateRule("StalledTrainingRule", {}, Trial());
  ASSERT_TRUE(quiet.ok());
  EXPECT_FALSE((*quiet)->StopTrainingOnFire());
  EXPECT_EQ((*quiet)->IdleTimeout(), absl::Seconds(1800));
  auto stop = CreateRule("StalledTrainingRule",
                         {{"stop_training_on_fire", "True"}, {"threshold", "5"}}, Trial());
  ASSERT_TRUE(stop.ok());
  EXPECT_TRUE((*stop)->StopTrainingOnFire());
  EXPECT_EQ((*stop)->IdleTimeout(), absl::Seconds(5));
}

}  // namespace
}  // namespace rules
}  // namespace tensorkeep
