// Step completeness, waiting and watching, against an in-process collector.
// No sleeps as synchronisation: every wait is on a condition with a bound.
#include <future>
#include <thread>

#include "base/errors.h"
#include "gmock/gmock.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using ::testing::ElementsAre;
using testing::Float32Record;

class LiveTest : public testing::ServerFixture {};

TEST_F(LiveTest, StepIsCompleteOnlyWhenEveryWorkerCommittedIt) {
  auto w0 = OpenWriter("t", "worker_0", 3);
  auto w1 = OpenWriter("t", "worker_1", 3);
  auto w2 = OpenWriter("t", "worker_2", 3);
  auto t = TrialOf("t");
  for (auto* w : {w0.get(), w1.get()}) {
    ASSERT_TRUE(w->Write(Float32Record("x", 0, 4, 1)).ok());
    ASSERT_TRUE(w->EndStep(0).ok());
    ASSERT_TRUE(w->Flush().ok());
  }
  EXPECT_THAT(*t.Steps(), ElementsAre());
  EXPECT_THAT(*t.Steps(client::kGlobal, /*show_incomplete_steps=*/true), ElementsAre(0));
  EXPECT_EQ(*t.HasPassedStep(0), client::StepState::kNotYetAvailable);
  ASSERT_TRUE(w2->Write(Float32Record("x", 0, 4, 1)).ok());
  ASSERT_TRUE(w2->EndStep(0).ok());
  ASSERT_TRUE(w2->Flush().ok());
  EXPECT_THAT(*t.Steps(), ElementsAre(0));
  EXPECT_EQ(*t.HasPassedStep(0), client::StepState::kAvailable);
  EXPECT_THAT(*t.tensor("x").Workers(0), ElementsAre("worker_0", "worker_1", "worker_2"));
}

TEST_F(LiveTest, LaterCompleteStepMakesMissingStepsUnavailable) {
  auto w0 = OpenWriter("t", "worker_0", 2);
  auto w1 = OpenWriter("t", "worker_1", 2);
  auto t = TrialOf("t");
  // worker_0 saves step 1, worker_1 saves nothing at 1; both move to 3.
  ASSERT_TRUE(w0->Write(Float32Record("x", 1, 4, 1)).ok());
  ASSERT_TRUE(w0->Write(Float32Record("x", 3, 4, 1)).ok());
  ASSERT_TRUE(w1->Write(Float32Record("x", 3, 4, 2)).ok());
  ASSERT_TRUE(w0->EndStep(3).ok());
  ASSERT_TRUE(w1->EndStep(3).ok());
  ASSERT_TRUE(w0->Flush().ok());
  ASSERT_TRUE(w1->Flush().ok());
  EXPECT_THAT(*t.Steps(), ElementsAre(1, 3));
  EXPECT_EQ(*t.HasPassedStep(2), client::StepState::kUnavailable);
  EXPECT_EQ(*t.HasPassedStep(4), client::StepState::kNotYetAvailable);
  EXPECT_EQ(GetReason(t.WaitForSteps({2}, client::kGlobal, 5)), Reason::kStepUnavailable);
}

TEST_F(LiveTest, EndOfTrainingFromEveryWorkerEndsTheTrial) {
  auto w0 = OpenWriter("t", "worker_0", 2);
  auto w1 = OpenWriter("t", "worker_1", 2);
  ASSERT_TRUE(w0->Write(Float32Record("x", 0, 4, 1)).ok());
  ASSERT_TRUE(w0->Close(true).ok());
  auto t = TrialOf("t");
  EXPECT_FALSE(t.Summary()->ended());
  EXPECT_THAT(*t.Steps(), ElementsAre()) << "worker_1 has not passed step 0";
  ASSERT_TRUE(w1->Close(true).ok());
  EXPECT_TRUE(t.Summary()->ended());
  EXPECT_THAT(*t.Steps(), ElementsAre(0));
  EXPECT_EQ(*t.HasPassedStep(5), client::StepState::kUnavailable);
  EXPECT_EQ(GetReason(t.WaitForSteps({5})), Reason::kNoMoreData);
}

// The "skip on StepUnavailable, stop on NoMoreData" loop over mode steps must
// end: past the last step of its mode, an ended trial answers NoMoreData for
// TRAIN, EVAL and PREDICT as for GLOBAL (issue 17), through the C++ client.
TEST_F(LiveTest, WaitPastTheLastModeStepOfAnEndedTrialIsNoMoreData) {
  auto w = OpenWriter("t");
  // Global steps 0..4: TRAIN mode steps 0 and 2 (1 skipped), then EVAL 0..2.
  ASSERT_TRUE(w->Write(Float32Record("x", 0, 4, 1, client::kTrain, 0)).ok());
  ASSERT_TRUE(w->Write(Float32Record("x", 1, 4, 1, client::kTrain, 2)).ok());
  for (uint64_t s = 0; s < 3; ++s) {
    ASSERT_TRUE(w->Write(Float32Record("x", 2 + s, 4, 1, client::kEval, s)).ok());
  }
  ASSERT_TRUE(w->Close(true).ok());
  auto t = TrialOf("t");
  ASSERT_TRUE(t.Summary()->ended());
  EXPECT_TRUE(t.WaitForSteps({0, 2}, client::kTrain).ok());
  EXPECT_EQ(GetReason(t.WaitForSteps({1}, client::kTrain)), Reason::kStepUnavailable);
  absl::Status s = t.WaitForSteps({3}, client::kTrain);
  EXPECT_EQ(GetReason(s), Reason::kNoMoreData) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("last TRAIN step is 2")) << s;
  EXPECT_TRUE(t.WaitForSteps({2}, client::kEval).ok());
  EXPECT_EQ(GetReason(t.WaitForSteps({3}, client::kEval)), Reason::kNoMoreData);
  EXPECT_EQ(GetReason(t.WaitForSteps({0, 99}, client::kEval)), Reason::kNoMoreData);
  // A mode that never saved anything: no more data either, and no -1 in the message.
  s = t.WaitForSteps({0}, client::kPredict);
  EXPECT_EQ(GetReason(s), Reason::kNoMoreData) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::Not(::testing::HasSubstr("-1"))) << s;
  EXPECT_EQ(GetReason(t.WaitForSteps({5})), Reason::kNoMoreData);
  EXPECT_TRUE(t.WaitForSteps({4}).ok()) << "the last global step is available";
  // The loop of the issue ends, and visits exactly the saved TRAIN steps.
  std::vector<uint64_t> seen;
  for (uint64_t step = 0; step < 1000; ++step) {
    absl::Status r = t.WaitForSteps({step}, client::kTrain);
    if (GetReason(r) == Reason::kNoMoreData) break;
    if (GetReason(r) == Reason::kStepUnavailable) continue;
    ASSERT_TRUE(r.ok()) << r;
    seen.push_back(step);
  }
  EXPECT_THAT(seen, ElementsAre(0, 2));
}

TEST_F(LiveTest, WaitForStepsWakesWhenAWriterCommits) {
  auto t = TrialOf("t");
  auto w = OpenWriter("t");
  ASSERT_TRUE(w->Flush().ok());  // the trial exists now
  auto waiting = std::async(std::launch::async, [&] { return t.WaitForSteps({4}, client::kGlobal, 30); });
  ASSERT_EQ(waiting.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "returned before the step existed";
  ASSERT_TRUE(w->Write(Float32Record("x", 4, 4, 1)).ok());
  ASSERT_TRUE(w->EndStep(4).ok());
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_TRUE(waiting.get().ok());
}

TEST_F(LiveTest, WaitForStepsTimesOut) {
  auto w = OpenWriter("t");
  ASSERT_TRUE(w->Flush().ok());
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = TrialOf("t").WaitForSteps({1}, client::kGlobal, 0.3);
  EXPECT_EQ(GetReason(s), Reason::kTimeout) << s;
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
}

// Reads StepEvents until `n` arrived or the stream ended.
std::vector<v1::StepEvent> Watch(Connection& c, const std::string& trial, uint64_t from, size_t n,
                                 grpc::ClientContext* ctx) {
  v1::WatchStepsRequest req;
  req.set_trial(trial);
  req.set_from_step(from);
  auto reader = c.stub()->WatchSteps(ctx, req);
  std::vector<v1::StepEvent> out;
  v1::StepEvent ev;
  while (out.size() < n && reader->Read(&ev)) out.push_back(ev);
  if (out.size() >= n) ctx->TryCancel();
  (void)reader->Finish();
  return out;
}

TEST_F(LiveTest, WatchStepsStreamsEachCompleteStepThenTheEnd) {
  auto w = OpenWriter("t");
  ASSERT_TRUE(w->Flush().ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto watched = std::async(std::launch::async, [&] { return Watch(*connection_, "t", 0, 100, &ctx); });
  for (uint64_t s : {0, 1, 3, 7}) {
    ASSERT_TRUE(w->Write(Float32Record("x", s, 4, 1, s == 3 ? 2 : 1, s)).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  ASSERT_TRUE(w->Close(true).ok());
  auto events = watched.get();
  ASSERT_EQ(events.size(), 5u);
  std::vector<uint64_t> steps;
  for (size_t i = 0; i < 4; ++i) steps.push_back(events[i].step());
  EXPECT_THAT(steps, ElementsAre(0, 1, 3, 7));
  EXPECT_EQ(events[2].mode(), v1::EVAL);
  EXPECT_TRUE(events[4].end_of_trial());
}

TEST_F(LiveTest, WatchIsResumableWithoutGapsOrRepeats) {
  auto w = OpenWriter("t");
  for (uint64_t s = 0; s < 6; ++s) {
    ASSERT_TRUE(w->Write(Float32Record("x", s, 4, 1)).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  ASSERT_TRUE(w->Flush().ok());
  grpc::ClientContext first;
  auto a = Watch(*connection_, "t", 0, 3, &first);
  ASSERT_EQ(a.size(), 3u);
  // A reconnecting watcher resumes after the last step it saw.
  grpc::ClientContext second;
  second.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto rest = std::async(std::launch::async,
                         [&] { return Watch(*connection_, "t", a.back().step() + 1, 100, &second); });
  ASSERT_TRUE(w->Close(true).ok());
  auto b = rest.get();
  std::vector<uint64_t> all;
  for (const auto& e : a) all.push_back(e.step());
  for (const auto& e : b) {
    if (!e.end_of_trial()) all.push_back(e.step());
  }
  EXPECT_THAT(all, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_TRUE(b.back().end_of_trial());
}

TEST_F(LiveTest, ManyIdleWaitersAllWakeOnOneCommit) {
  auto w = OpenWriter("t");
  ASSERT_TRUE(w->Flush().ok());
  auto t = TrialOf("t");
  std::vector<std::future<absl::Status>> waiters;
  for (int i = 0; i < 200; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] { return t.WaitForSteps({0}, client::kGlobal, 60); }));
  }
  ASSERT_TRUE(w->Write(Float32Record("x", 0, 4, 1)).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  for (auto& f : waiters) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    EXPECT_TRUE(f.get().ok());
  }
}

TEST_F(LiveTest, StopRequestReachesWritersThroughAcks) {
  auto w = OpenWriter("t");
  ASSERT_TRUE(w->Write(Float32Record("x", 0, 4, 1)).ok());
  ASSERT_TRUE(w->Flush().ok());
  EXPECT_FALSE(w->StopRequested());
  v1::RuleStatus rs;
  rs.set_rule("VanishingGradient");
  rs.set_state(v1::RuleStatus::ISSUES_FOUND);
  rs.set_step(0);
  rs.set_action("stop");
  rs.set_message("abs mean below threshold");
  ASSERT_TRUE(TrialOf("t").ReportRuleStatus(rs).ok());
  // The writer sends nothing more: the collector tells it unasked.
  for (int i = 0; i < 2000 && !w->StopRequested(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // bounded poll of a flag
  }
  EXPECT_TRUE(w->StopRequested());
  EXPECT_NE(w->StopReason().find("VanishingGradient"), std::string::npos);
  auto statuses = TrialOf("t").RuleStatuses();
  ASSERT_TRUE(statuses.ok());
  ASSERT_EQ(statuses->size(), 1u);
  EXPECT_EQ((*statuses)[0].state(), v1::RuleStatus::ISSUES_FOUND);
}

}  // namespace
}  // namespace tensorkeep
