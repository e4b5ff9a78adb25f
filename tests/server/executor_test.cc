// No blocking work in a gRPC reaction: EndTrial and ReportRuleStatus are
// finished from the committer's completion, reductions, histograms and value
// reads run on the Collector's executor (server/executor.h).
#include "server/executor.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "base/errors.h"
#include "gmock/gmock.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;

TEST(ExecutorTest, RunsQueuedTasksAndRefusesBeyondItsQueue) {
  Executor executor(ExecutorOptions{1, 2});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  ASSERT_TRUE(executor.Schedule([&] {
    started.set_value();
    released.wait();
  }).ok());
  started.get_future().wait();  // the only thread is busy; the queue is empty
  std::atomic<int> ran{0};
  ASSERT_TRUE(executor.Schedule([&] { ran++; }).ok());
  ASSERT_TRUE(executor.Schedule([&] { ran++; }).ok());
  absl::Status full = executor.Schedule([&] { ran++; });
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  release.set_value();
  while (executor.completed() < 3) std::this_thread::yield();
  EXPECT_EQ(ran.load(), 2);
}

class OffloadTest : public testing::ServerFixture {
 protected:
  // A cheap call answered within `deadline_ms`?
  bool CheapCallAnswers(int deadline_ms) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    v1::HasPassedStepRequest req;
    req.set_trial("t");
    req.set_step(0);
    v1::HasPassedStepResponse resp;
    grpc::Status s = connection_->stub()->HasPassedStep(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return s.ok();
  }
};

// Before, each EndTrial and ReportRuleStatus held a gRPC thread in
// future.get() until its write was durable: a slow disk (here: a committer
// held up in a completion) took every thread, and the collector stopped
// answering anyone.
TEST_F(OffloadTest, CallsWaitingForTheCommitterHoldNoGrpcThread) {
  auto w = OpenWriter("t");
  ASSERT_TRUE(w->Write(Float32Record("x", 0, 4, 1)).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  ASSERT_TRUE(w->Flush().ok());
  auto trial = server_->collector()->GetTrial("t");
  ASSERT_TRUE(trial.ok());

  // Stall the committer as a disk that does not answer would.
  std::promise<void> unstall;
  std::shared_future<void> unstalled = unstall.get_future().share();
  std::promise<void> stalled;
  PendingWrite stall;
  stall.trial = *trial;
  stall.done = [&](const absl::Status&) {
    stalled.set_value();
    unstalled.wait();
  };
  server_->collector()->Submit(std::move(stall));
  stalled.get_future().wait();

  const int kCalls = 64;
  std::vector<std::future<absl::Status>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::async(std::launch::async, [this, i] {
      if (i % 2 == 0) return TrialOf("t").End().status();
      v1::RuleStatus rs;
      rs.set_trial("t");
      rs.set_rule("rule_" + std::to_string(i));
      rs.set_state(v1::RuleStatus::IN_PROGRESS);
      return TrialOf("t").ReportRuleStatus(rs);
    }));
  }
  // Give the calls time to reach the collector (the check below passes as
  // soon as they did; before, it failed once they had).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (auto& c : calls) {
    EXPECT_EQ(c.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "a call finished before its write was durable";
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(CheapCallAnswers(3000));
  std::printf("a cheap call with %d calls waiting for a stalled committer: %.1f ms\n", kCalls,
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count());
  unstall.set_value();
  for (auto& c : calls) EXPECT_TRUE(c.get().ok());
  EXPECT_TRUE(TrialOf("t").Summary()->ended());
  EXPECT_EQ(TrialOf("t").RuleStatuses()->size(), static_cast<size_t>(kCalls / 2));
}

TEST_F(OffloadTest, ReductionsHistogramsAndValuesRunOnTheExecutor) {
  auto w = OpenWriter("t");
  ASSERT_TRUE(w->Write(Float32Record("x", 0, 1 << 16, 1)).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  ASSERT_TRUE(w->Flush().ok());
  Executor* executor = server_->collector()->executor();
  auto x = TrialOf("t").tensor("x");
  const size_t before = executor->completed();
  auto mean = x.ReductionValue(0, "mean");
  ASSERT_TRUE(mean.ok()) << mean.status();
  auto hist = x.GetHistogram(0);
  ASSERT_TRUE(hist.ok()) << hist.status();
  auto value = x.GetValue(0);
  ASSERT_TRUE(value.ok()) << value.status();
  // (A task counts once it returned, just after it finished its call.)
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (executor->completed() < before + 3 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(executor->completed(), before + 3);
  // Failures map as before.
  EXPECT_EQ(GetReason(x.ReductionValue(7, "mean").status()), Reason::kStepNotYetAvailable);
  EXPECT_EQ(GetReason(x.ReductionValue(0, "no_such_reduction").status()), Reason::kBadRequest);
  EXPECT_EQ(GetReason(TrialOf("nope").End().status()), Reason::kTrialNotFound);

  // With the executor busy, reductions wait; other calls do not.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  for (size_t i = 0; i < server_->collector()->options().executor_threads; ++i) {
    ASSERT_TRUE(executor->Schedule([released] { released.wait(); }).ok());
  }
  auto slow = std::async(std::launch::async, [&] { return x.ReductionValue(0, "max"); });
  EXPECT_EQ(slow.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  EXPECT_TRUE(CheapCallAnswers(3000));
  release.set_value();
  EXPECT_TRUE(slow.get().ok());
}

}  // namespace
}  // namespace tensorkeep
