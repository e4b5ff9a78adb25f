// StalledTrainingRule: fires when no step completes for `threshold` seconds
// (InvokeRule invokes it when idle), and not on a trial that keeps going or
// ended. Bounded waits, no sleeps.
#include <future>

#include "gmock/gmock.h"
#include "tests/rules/rules_fixture.h"

namespace tensorkeep {
namespace {

using ::testing::HasSubstr;

constexpr auto kBound = std::chrono::seconds(20);

class StalledTrainingTest : public rules_testing::RulesFixture {};

TEST_F(StalledTrainingTest, FiresWhenNoStepCompletesWithinThreshold) {
  auto w = OpenWriter("stalled");
  for (uint64_t s = 0; s < 3; ++s) {
    ASSERT_TRUE(w->Write(rules_testing::MakeRecord({"x", s, {1}})).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  ASSERT_TRUE(w->Flush().ok());
  auto rule = rules::CreateRule("StalledTrainingRule", {{"threshold", "0.2"}}, TrialOf("stalled"));
  ASSERT_TRUE(rule.ok()) << rule.status();
  rules::InvokeOptions options;
  options.on_issue = [](const rules::RuleIssue&) { return false; };
  auto done = std::async(std::launch::async, [&] { return rules::InvokeRule(**rule, options); });
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready);
  auto summary = done.get();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(FirstIssueStep(*summary), 2) << "the issue is at the last step seen";
  EXPECT_THAT(summary->first_issue->message, HasSubstr("no new step for"));
  EXPECT_THAT(summary->first_issue->message, HasSubstr("last step 2"));
  EXPECT_EQ(summary->steps_evaluated, 3u);
}

TEST_F(StalledTrainingTest, FiresBeforeTheFirstStepToo) {
  auto w = OpenWriter("empty");
  ASSERT_TRUE(w->Flush().ok());
  auto rule = rules::CreateRule("StalledTrainingRule", {{"threshold", "0.2"}}, TrialOf("empty"));
  ASSERT_TRUE(rule.ok()) << rule.status();
  rules::InvokeOptions options;
  options.on_issue = [](const rules::RuleIssue&) { return false; };
  auto done = std::async(std::launch::async, [&] { return rules::InvokeRule(**rule, options); });
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready);
  auto summary = done.get();
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_TRUE(summary->first_issue.has_value());
  EXPECT_FALSE(summary->first_issue->step.has_value());
  EXPECT_THAT(summary->first_issue->message, HasSubstr("no step yet"));
}

TEST_F(StalledTrainingTest, StaysQuietOnATrialThatEndsInTime) {
  std::vector<rules_testing::RecordSpec> records;
  for (uint64_t s = 0; s < 5; ++s) records.push_back({"x", s, {1}});
  WriteTrial("t", records);
  auto s = Run("StalledTrainingRule", {{"threshold", "30"}}, "t");
  EXPECT_EQ(FirstIssueStep(s), -1);
  EXPECT_EQ(s.issues_found, 0u);
  EXPECT_EQ(s.steps_evaluated, 5u);
}

}  // namespace
}  // namespace tensorkeep
