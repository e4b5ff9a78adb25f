// InvokeRule's loop semantics (smdebug's invoke_rule) against an in-process
// collector: steps in order from start_step, end_step exclusive, skipped
// steps, the end of the trial, raise_eval_cond, live trials. Waits are on
// conditions with bounds, never sleeps.
#include "rules/invoke_rule.h"

#include <condition_variable>
#include <future>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "gmock/gmock.h"
#include "tests/rules/rules_fixture.h"

namespace tensorkeep {
namespace rules {
namespace {

using rules_testing::RecordSpec;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr auto kBound = std::chrono::seconds(20);

// A rule that reads the mean of tensor "x" (so steps without "x" fail with
// the collector's TensorUnavailableForStep), and can be scripted to fire or
// fail at given steps. Records the steps it saw; thread-safe to observe.
class ScriptedRule : public Rule {
 public:
  explicit ScriptedRule(client::Trial trial) : Rule("ScriptedRule", std::move(trial)) {}

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(step);
    }
    cv_.notify_all();
    auto error = errors.find(step);
    if (error != errors.end()) return error->second;
    auto mean = base_trial().tensor("x").ReductionValue(step, "mean");
    if (!mean.ok()) return mean.status();
    if (fire_at.count(step) != 0) return Fire(absl::StrCat("fired at ", step));
    return false;
  }

  std::vector<uint64_t> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  // Waits until `step` was seen; false after the bound.
  bool WaitSeen(uint64_t step) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kBound,
                        [&] { return std::find(seen_.begin(), seen_.end(), step) != seen_.end(); });
  }

  std::set<uint64_t> fire_at;
  std::map<uint64_t, absl::Status> errors;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> seen_;
};

class InvokeRuleTest : public rules_testing::RulesFixture {
 protected:
  // Steps 0..n-1, each with "x" = {step}.
  void WriteSteps(const std::string& trial, uint64_t n) {
    std::vector<RecordSpec> records;
    for (uint64_t s = 0; s < n; ++s) records.push_back({"x", s, {static_cast<double>(s)}});
    WriteTrial(trial, records);
  }
};

TEST_F(InvokeRuleTest, EvaluatesEveryCompleteStepInOrderUntilTheEndOfTheTrial) {
  WriteSteps("t", 5);
  ScriptedRule rule(TrialOf("t"));
  auto summary = InvokeRule(rule);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(summary->steps_evaluated, 5u);
  EXPECT_EQ(summary->steps_skipped, 0u);
  EXPECT_TRUE(summary->end_of_trial);
  EXPECT_EQ(summary->last_step, 4u);
  EXPECT_EQ(summary->issues_found, 0u);
}

TEST_F(InvokeRuleTest, SkipsStepsWhereTheRulesTensorsAreMissing) {
  WriteTrial("t", {{"x", 0, {1}}, {"y", 1, {1}}, {"x", 2, {1}}, {"y", 3, {1}}, {"x", 4, {1}}});
  ScriptedRule rule(TrialOf("t"));
  auto summary = InvokeRule(rule);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(summary->steps_evaluated, 3u);
  EXPECT_EQ(summary->steps_skipped, 2u) << "x is unavailable at steps 1 and 3";
}

TEST_F(InvokeRuleTest, SkipsStepsOnStepUnavailableAndTensorUnavailable) {
  WriteSteps("t", 4);
  ScriptedRule rule(TrialOf("t"));
  rule.errors[1] = MakeError(Reason::kStepUnavailable, "no step 1");
  rule.errors[2] = MakeError(Reason::kTensorUnavailable, "no such tensor");
  auto summary = InvokeRule(rule);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps_evaluated, 2u);
  EXPECT_EQ(summary->steps_skipped, 2u);
  EXPECT_TRUE(summary->end_of_trial);
}

TEST_F(InvokeRuleTest, StartsAtStartStep) {
  WriteSteps("t", 5);
  ScriptedRule rule(TrialOf("t"));
  auto summary = InvokeRule(rule, /*start_step=*/3);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(3, 4));
}

TEST_F(InvokeRuleTest, EndStepIsExclusive) {
  WriteSteps("t", 10);
  ScriptedRule rule(TrialOf("t"));
  auto summary = InvokeRule(rule, 2, /*end_step=*/5);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(2, 3, 4));
  EXPECT_FALSE(summary->end_of_trial);
}

TEST_F(InvokeRuleTest, EndStepAtOrBeforeStartStepEvaluatesNothing) {
  WriteSteps("t", 3);
  ScriptedRule rule(TrialOf("t"));
  auto summary = InvokeRule(rule, 2, 2);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre());
}

TEST_F(InvokeRuleTest, EndStepReturnsWithoutWaitingForTheRestOfALiveTrial) {
  auto w = OpenWriter("live");
  for (uint64_t s = 0; s < 4; ++s) {
    ASSERT_TRUE(w->Write(rules_testing::MakeRecord({"x", s, {1}})).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  ASSERT_TRUE(w->Flush().ok());
  ScriptedRule rule(TrialOf("live"));
  auto done = std::async(std::launch::async, [&] { return InvokeRule(rule, 0, 4); });
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready);
  auto summary = done.get();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1, 2, 3));
  EXPECT_FALSE(summary->end_of_trial);
}

TEST_F(InvokeRuleTest, NoMoreDataFromTheRuleEndsTheInvocationCleanly) {
  WriteSteps("t", 5);
  ScriptedRule rule(TrialOf("t"));
  rule.errors[2] = MakeError(Reason::kNoMoreData, "the training ended");
  auto summary = InvokeRule(rule);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1, 2));
  EXPECT_TRUE(summary->end_of_trial);
}

TEST_F(InvokeRuleTest, OtherErrorsEndTheInvocationWithTheStep) {
  WriteSteps("t", 5);
  ScriptedRule rule(TrialOf("t"));
  rule.errors[1] = absl::InternalError("boom");
  auto summary = InvokeRule(rule);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(summary.status().message(), HasSubstr("at step 1: boom"));
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1));
}

TEST_F(InvokeRuleTest, RaiseEvalCondEndsWithConditionMetAtTheFirstIssue) {
  WriteSteps("t", 5);
  ScriptedRule rule(TrialOf("t"));
  rule.fire_at = {2, 3};
  auto summary = InvokeRule(rule, 0, std::nullopt, /*raise_eval_cond=*/true);
  ASSERT_FALSE(summary.ok());
  EXPECT_TRUE(IsConditionMet(summary.status()));
  EXPECT_EQ(ConditionMetStep(summary.status()), 2u);
  EXPECT_THAT(summary.status().message(), HasSubstr("ScriptedRule at step 2"));
  EXPECT_THAT(summary.status().message(), HasSubstr("fired at 2"));
  EXPECT_EQ(GetReason(summary.status()), Reason::kNone);
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1, 2));
}

TEST_F(InvokeRuleTest, WithoutRaiseEvalCondIssuesAreRecordedAndEvaluationGoesOn) {
  WriteSteps("t", 5);
  ScriptedRule rule(TrialOf("t"));
  rule.fire_at = {2, 3};
  auto summary = InvokeRule(rule);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(summary->issues_found, 2u);
  EXPECT_THAT(summary->issue_steps, ElementsAre(2, 3));
  ASSERT_TRUE(summary->first_issue.has_value());
  EXPECT_EQ(summary->first_issue->step, 2u);
  EXPECT_EQ(summary->first_issue->message, "fired at 2");
}

TEST_F(InvokeRuleTest, OnIssueCanStopTheInvocation) {
  WriteSteps("t", 5);
  ScriptedRule rule(TrialOf("t"));
  rule.fire_at = {2};
  InvokeOptions options;
  std::vector<uint64_t> outcomes;
  options.on_step = [&](const StepOutcome& o) { outcomes.push_back(o.step.step); };
  options.on_issue = [](const RuleIssue&) { return false; };
  auto summary = InvokeRule(rule, options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->stopped_on_issue);
  EXPECT_FALSE(summary->end_of_trial);
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1, 2));
  EXPECT_THAT(outcomes, ElementsAre(0, 1, 2));
}

TEST_F(InvokeRuleTest, EvaluatesStepsOfALiveTrialAsTheyComplete) {
  auto w = OpenWriter("live");
  ASSERT_TRUE(w->Flush().ok());
  ScriptedRule rule(TrialOf("live"));
  auto done = std::async(std::launch::async, [&] { return InvokeRule(rule); });
  ASSERT_TRUE(w->Write(rules_testing::MakeRecord({"x", 0, {1}})).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  ASSERT_TRUE(rule.WaitSeen(0));
  EXPECT_EQ(done.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "the trial is still running";
  ASSERT_TRUE(w->Write(rules_testing::MakeRecord({"x", 1, {1}})).ok());
  ASSERT_TRUE(w->Close(/*end_of_training=*/true).ok());
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready);
  auto summary = done.get();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1));
  EXPECT_TRUE(summary->end_of_trial);
}

TEST_F(InvokeRuleTest, WaitsForATrialThatDoesNotExistYet) {
  ScriptedRule rule(TrialOf("later"));
  auto done = std::async(std::launch::async, [&] { return InvokeRule(rule); });
  WriteSteps("later", 2);
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready);
  auto summary = done.get();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(rule.seen(), ElementsAre(0, 1));
}

TEST_F(InvokeRuleTest, FailsOnAMissingTrialWhenNotWaitingForIt) {
  ScriptedRule rule(TrialOf("nowhere"));
  InvokeOptions options;
  options.wait_for_trial = false;
  auto summary = InvokeRule(rule, options);
  EXPECT_EQ(GetReason(summary.status()), Reason::kTrialNotFound) << summary.status();
}

TEST_F(InvokeRuleTest, TicksWhileWaitingForSteps) {
  auto w = OpenWriter("quiet");
  ASSERT_TRUE(w->Flush().ok());
  ScriptedRule rule(TrialOf("quiet"));
  std::promise<void> ticked;
  int ticks = 0;
  InvokeOptions options;
  options.tick_interval = absl::Milliseconds(20);
  options.on_tick = [&] {
    if (ticks++ == 0) ticked.set_value();
  };
  auto done = std::async(std::launch::async, [&] { return InvokeRule(rule, options); });
  ASSERT_EQ(ticked.get_future().wait_for(kBound), std::future_status::ready);
  ASSERT_TRUE(w->Close(/*end_of_training=*/true).ok());
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready);
  auto summary = done.get();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->end_of_trial);
}

TEST_F(InvokeRuleTest, ResumesAfterTheCollectorRestartsWithoutMissingOrRepeatingSteps) {
  auto w = OpenWriter("t");
  for (uint64_t s = 0; s < 2; ++s) {
    ASSERT_TRUE(w->Write(rules_testing::MakeRecord({"x", s, {1}})).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  ASSERT_TRUE(w->Flush().ok());
  ScriptedRule rule(TrialOf("t"));
  std::vector<uint64_t> steps;  // each step's outcome (the rule may see one twice)
  InvokeOptions options;
  options.on_step = [&](const StepOutcome& o) { steps.push_back(o.step.step); };
  auto done = std::async(std::launch::async, [&] { return InvokeRule(rule, options); });
  ASSERT_TRUE(rule.WaitSeen(1));
  // Restart the collector on the same port and data directory.
  const int port = server_->port();
  w.reset();
  server_->Shutdown(0.5);
  server_.reset();
  ServerOptions o;
  o.listen = absl::StrCat("127.0.0.1:", port);
  o.store.path = dir_ + "/db";
  auto restarted = CollectorServer::Start(o);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  server_ = std::move(*restarted);
  auto w2 = OpenWriter("t");
  for (uint64_t s = 2; s < 4; ++s) {
    ASSERT_TRUE(w2->Write(rules_testing::MakeRecord({"x", s, {1}})).ok());
    ASSERT_TRUE(w2->EndStep(s).ok());
  }
  ASSERT_TRUE(w2->Close(/*end_of_training=*/true).ok());
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready);
  auto summary = done.get();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(steps, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(summary->steps_evaluated, 4u);
  EXPECT_TRUE(summary->end_of_trial);
}

}  // namespace
}  // namespace rules
}  // namespace tensorkeep
