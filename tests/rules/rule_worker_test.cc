// The rule worker binary (tensorkeep-rules) end to end, as a child process
// against an in-process collector: statuses reported, the stop action
// reaching a writer, several workers on one trial, errors and usage. Every
// wait is on a condition (process exit, a status on the WatchRuleStatuses
// stream, a writer's stop flag) with a bound.
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "tests/rules/rule_worker_process.h"
#include "tests/rules/rules_fixture.h"

namespace tensorkeep {
namespace {

using rules_testing::Fill;
using rules_testing::MakeRecord;
using rules_testing::RecordSpec;
using rules_testing::RuleWorkerProcess;
using rules_testing::WaitForRuleStatus;
using ::testing::HasSubstr;

class RuleWorkerTest : public rules_testing::RulesFixture {
 protected:
  std::vector<std::string> Args(const std::string& trial, const std::string& rule,
                                std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"--server", server_->address(), "--trial",
                                     trial,      "--rule",           rule};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  std::map<std::string, v1::RuleStatus> Statuses(const std::string& trial) {
    auto list = TrialOf(trial).RuleStatuses();
    EXPECT_TRUE(list.ok()) << list.status();
    std::map<std::string, v1::RuleStatus> out;
    if (list.ok()) {
      for (const auto& s : *list) out[s.rule()] = s;
    }
    return out;
  }
  static RecordSpec Gradient(uint64_t step, double value) {
    return {"gradient/fc.weight", step, Fill(8, value), {}, 1, -1, {"gradients"}};
  }
};

TEST_F(RuleWorkerTest, HelpListsTheBuiltinRules) {
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start({"--help"}));
  EXPECT_EQ(p.Wait(), 0);
  EXPECT_THAT(p.output(), HasSubstr("--action stop"));
  EXPECT_THAT(p.output(), HasSubstr("VanishingGradient"));
  EXPECT_THAT(p.output(), HasSubstr("StalledTrainingRule"));
}

TEST_F(RuleWorkerTest, UsageErrorsExitWithTwo) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--rule", "VanishingGradient"},
           {"--trial", "t"},
           {"--trial", "t", "--rule", "AllZero", "--param", "novalue"},
           {"--trial", "t", "--rule", "AllZero", "--action", "pause"},
           {"--trial", "t", "--rule", "AllZero", "--name", "bad name"},
           {"--trial", "t", "--rule", "AllZero", "--bogus"}}) {
    RuleWorkerProcess p;
    ASSERT_TRUE(p.Start(args));
    EXPECT_EQ(p.Wait(), 2) << p.output();
  }
}

TEST_F(RuleWorkerTest, ReportsNoIssuesFoundWhenTheTrialEndsCleanly) {
  WriteTrial("good", {Gradient(0, 1e-3), Gradient(1, 1e-3), Gradient(2, 1e-3)});
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("good", "VanishingGradient")));
  ASSERT_EQ(p.Wait(), 0) << p.output();
  auto statuses = Statuses("good");
  ASSERT_EQ(statuses.count("VanishingGradient"), 1u);
  const v1::RuleStatus& s = statuses["VanishingGradient"];
  EXPECT_EQ(s.state(), v1::RuleStatus::NO_ISSUES_FOUND);
  EXPECT_EQ(s.last_evaluated_step(), 2);
  EXPECT_EQ(s.action(), "");
  EXPECT_FALSE(TrialOf("good").Summary()->stop_requested());
}

TEST_F(RuleWorkerTest, StopActionStopsTheTrainingLoopWhenTheRuleFires) {
  auto w = OpenWriter("bad");
  ASSERT_TRUE(w->Flush().ok());
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("bad", "VanishingGradient", {"--action", "stop"})));
  // The training loop: healthy gradients at steps 0 and 1, vanished from
  // step 2 on, until the writer sees the stop request (bounded).
  uint64_t step = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!w->StopRequested() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(w->Write(MakeRecord(Gradient(step, step < 2 ? 1e-3 : 1e-12))).ok());
    ASSERT_TRUE(w->EndStep(step).ok());
    ASSERT_TRUE(w->Flush().ok());
    ++step;
  }
  ASSERT_TRUE(w->StopRequested()) << p.output();
  EXPECT_THAT(w->StopReason(), HasSubstr("VanishingGradient"));
  ASSERT_EQ(p.Wait(), 0) << "the worker stops after the issue: " << p.output();
  EXPECT_THAT(p.output(), HasSubstr("found an issue"));
  auto statuses = Statuses("bad");
  const v1::RuleStatus& s = statuses["VanishingGradient"];
  EXPECT_EQ(s.state(), v1::RuleStatus::ISSUES_FOUND);
  EXPECT_EQ(s.step(), 2);
  EXPECT_EQ(s.action(), "stop");
  EXPECT_THAT(s.message(), HasSubstr("gradient/fc.weight"));
  EXPECT_TRUE(TrialOf("bad").Summary()->stop_requested());
  ASSERT_TRUE(w->Close(true).ok());
}

TEST_F(RuleWorkerTest, TwoRuleWorkersWatchOneLiveTrial) {
  auto w = OpenWriter("live");
  ASSERT_TRUE(w->Flush().ok());
  RuleWorkerProcess vanishing, exploding;
  ASSERT_TRUE(vanishing.Start(Args("live", "VanishingGradient", {"--name", "vg-1"})));
  ASSERT_TRUE(exploding.Start(Args("live", "ExplodingTensor")));
  // Both report IN_PROGRESS before any step exists.
  std::set<std::string> started;
  auto in_progress = WaitForRuleStatus(*connection_, "live", [&](const v1::RuleStatus& s) {
    if (s.state() == v1::RuleStatus::IN_PROGRESS) started.insert(s.rule());
    return started.size() == 2;
  });
  ASSERT_TRUE(in_progress.has_value()) << vanishing.output() << exploding.output();
  EXPECT_EQ(started, (std::set<std::string>{"vg-1", "ExplodingTensor"}));
  for (uint64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(w->Write(MakeRecord(Gradient(step, step == 3 ? 1e-9 : 1e-3))).ok());
    ASSERT_TRUE(w->EndStep(step).ok());
  }
  ASSERT_TRUE(w->Close(/*end_of_training=*/true).ok());
  EXPECT_EQ(vanishing.Wait(), 0) << vanishing.output();
  EXPECT_EQ(exploding.Wait(), 0) << exploding.output();
  auto statuses = Statuses("live");
  EXPECT_EQ(statuses["vg-1"].state(), v1::RuleStatus::ISSUES_FOUND);
  EXPECT_EQ(statuses["vg-1"].step(), 3);
  EXPECT_EQ(statuses["ExplodingTensor"].state(), v1::RuleStatus::NO_ISSUES_FOUND);
  EXPECT_EQ(statuses["ExplodingTensor"].last_evaluated_step(), 4);
  EXPECT_EQ(statuses.count("VanishingGradient"), 0u) << "reported under its --name";
}

TEST_F(RuleWorkerTest, ReportsProgressWhileTheTrialRuns) {
  auto w = OpenWriter("running");
  ASSERT_TRUE(w->Flush().ok());
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("running", "VanishingGradient")));
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(w->Write(MakeRecord(Gradient(step, 1e-3))).ok());
    ASSERT_TRUE(w->EndStep(step).ok());
  }
  ASSERT_TRUE(w->Flush().ok());
  // Within about a second of evaluating step 2, the worker says so.
  auto progress = WaitForRuleStatus(*connection_, "running", [](const v1::RuleStatus& s) {
    return s.state() == v1::RuleStatus::IN_PROGRESS && s.last_evaluated_step() == 2;
  });
  ASSERT_TRUE(progress.has_value()) << p.output();
  ASSERT_TRUE(w->Close(/*end_of_training=*/true).ok());
  ASSERT_EQ(p.Wait(), 0) << p.output();
  EXPECT_EQ(Statuses("running")["VanishingGradient"].state(), v1::RuleStatus::NO_ISSUES_FOUND);
}

TEST_F(RuleWorkerTest, KeepGoingEvaluatesUntilTheEndOfTheTrial) {
  WriteTrial("t", {Gradient(0, 1e-3), Gradient(1, 1e-9), Gradient(2, 1e-3), Gradient(3, 1e-3)});
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("t", "VanishingGradient", {"--keep-going"})));
  ASSERT_EQ(p.Wait(), 0) << p.output();
  const v1::RuleStatus s = Statuses("t")["VanishingGradient"];
  EXPECT_EQ(s.state(), v1::RuleStatus::ISSUES_FOUND);
  EXPECT_EQ(s.step(), 1);
  EXPECT_EQ(s.last_evaluated_step(), 3);
}

TEST_F(RuleWorkerTest, FromStepSkipsEarlierSteps) {
  WriteTrial("t", {Gradient(0, 1e-9), Gradient(1, 1e-3), Gradient(2, 1e-3)});
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("t", "VanishingGradient", {"--from-step", "1"})));
  ASSERT_EQ(p.Wait(), 0) << p.output();
  EXPECT_EQ(Statuses("t")["VanishingGradient"].state(), v1::RuleStatus::NO_ISSUES_FOUND);
}

TEST_F(RuleWorkerTest, WaitsForATrialThatDoesNotExistYet) {
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("later", "AllZero", {"--param", "tensor_regex=w"})));
  WriteTrial("later", {{"w", 0, {1, 2}}, {"w", 1, {0, 0}}});
  ASSERT_EQ(p.Wait(), 0) << p.output();
  const v1::RuleStatus s = Statuses("later")["AllZero"];
  EXPECT_EQ(s.state(), v1::RuleStatus::ISSUES_FOUND);
  EXPECT_EQ(s.step(), 1);
}

TEST_F(RuleWorkerTest, BadParameterIsReportedAsErrorAndExitsWithOne) {
  WriteTrial("t", {Gradient(0, 1e-3)});
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("t", "VanishingGradient", {"--param", "threshold=tiny"})));
  ASSERT_EQ(p.Wait(), 1) << p.output();
  const v1::RuleStatus s = Statuses("t")["VanishingGradient"];
  EXPECT_EQ(s.state(), v1::RuleStatus::ERROR);
  EXPECT_THAT(s.message(), HasSubstr("threshold"));
  EXPECT_THAT(p.output(), HasSubstr("threshold"));
}

TEST_F(RuleWorkerTest, UnknownRuleIsReportedAsErrorListingTheRules) {
  WriteTrial("t", {Gradient(0, 1e-3)});
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("t", "NoSuchRule")));
  ASSERT_EQ(p.Wait(), 1) << p.output();
  const v1::RuleStatus s = Statuses("t")["NoSuchRule"];
  EXPECT_EQ(s.state(), v1::RuleStatus::ERROR);
  EXPECT_THAT(s.message(), HasSubstr("VanishingGradient"));
}

TEST_F(RuleWorkerTest, TerminationIsReportedAsError) {
  auto w = OpenWriter("running");
  ASSERT_TRUE(w->Flush().ok());
  RuleWorkerProcess p;
  ASSERT_TRUE(p.Start(Args("running", "VanishingGradient")));
  ASSERT_TRUE(WaitForRuleStatus(*connection_, "running", [](const v1::RuleStatus& s) {
                return s.state() == v1::RuleStatus::IN_PROGRESS;
              }).has_value());
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(), 128 + SIGTERM) << p.output();
  const v1::RuleStatus s = Statuses("running")["VanishingGradient"];
  EXPECT_EQ(s.state(), v1::RuleStatus::ERROR);
  EXPECT_THAT(s.message(), HasSubstr("SIGTERM"));
}

}  // namespace
}  // namespace tensorkeep
