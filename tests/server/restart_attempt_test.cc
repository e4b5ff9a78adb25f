// Restarted jobs (issue 13, docs/semantics.md "Restarted jobs"): a writer of a
// higher Open.attempt than its worker's rewrites the steps the earlier attempt
// committed (a rewritten record replaces the earlier one, the others stay),
// commits again from nothing while the steps complete so far stay complete,
// and the restart is recorded and survives a restart of the collector; a
// writer of an older attempt is refused; a new attempt of an ended trial is
// refused; a restart that comes before the collector saw the failed attempt's
// stream end waits for it instead of failing.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/errors.h"
#include "gmock/gmock.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::AsFloats;
using testing::Float32Record;
using ::testing::HasSubstr;

// The record of (worker, step) in `attempt`: values only that combination makes.
v1::TensorRecord RecordOf(int worker, uint64_t step, uint32_t attempt) {
  return Float32Record("w", step, 16, static_cast<uint32_t>(1000 * attempt + 10 * step + worker));
}

class RestartAttemptTest : public testing::ServerFixture {
 protected:
  std::unique_ptr<client::Writer> Open(int worker, uint32_t attempt, uint32_t num_workers = 2,
                                       absl::Status* error = nullptr) {
    client::WriterOptions o;
    o.server = server_->address();
    o.trial = "t";
    o.worker = "worker_" + std::to_string(worker);
    o.num_workers = num_workers;
    o.attempt = attempt;
    o.retry_timeout_seconds = 20;
    auto w = client::Writer::Open(o);
    if (error != nullptr) *error = w.status();
    if (!w.ok()) {
      if (error == nullptr) ADD_FAILURE() << w.status();
      return nullptr;
    }
    return std::move(*w);
  }
  // Writes steps [from, to] as `attempt` and ends each.
  void WriteSteps(client::Writer* w, int worker, uint64_t from, uint64_t to, uint32_t attempt) {
    for (uint64_t s = from; s <= to; ++s) {
      ASSERT_TRUE(w->Write(RecordOf(worker, s, attempt)).ok());
      ASSERT_TRUE(w->EndStep(s).ok());
    }
    ASSERT_TRUE(w->Flush().ok());
  }
  // The values of worker's record at `step`.
  std::vector<float> ValueAt(int worker, uint64_t step) {
    auto v = client::Tensor(connection_, "t", "w")
                 .GetValue(step, client::kGlobal, "worker_" + std::to_string(worker));
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? AsFloats(v->data) : std::vector<float>{};
  }
  v1::WorkerStatus StatusOf(int worker) {
    auto all = TrialOf("t").WorkerStatuses();
    EXPECT_TRUE(all.ok()) << all.status();
    for (const auto& s : all.value()) {
      if (s.worker() == "worker_" + std::to_string(worker)) return s;
    }
    ADD_FAILURE() << "no worker_" << worker;
    return {};
  }
  int64_t CompleteThrough() {
    auto s = TrialOf("t").Summary();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->complete_through() : -2;
  }
};

TEST_F(RestartAttemptTest, NewAttemptRewritesCommittedStepsAndIsRecorded) {
  // Attempt 0: worker_0 through step 4 and worker_1 through step 6, then
  // the job fails (no close): steps 0-4 are complete.
  {
    auto w0 = Open(0, 0);
    auto w1 = Open(1, 0);
    ASSERT_NE(w0, nullptr);
    ASSERT_NE(w1, nullptr);
    WriteSteps(w0.get(), 0, 0, 4, 0);
    WriteSteps(w1.get(), 1, 0, 6, 0);
    ASSERT_TRUE(w0->Close(false).ok());
    ASSERT_TRUE(w1->Close(false).ok());
  }
  ASSERT_EQ(CompleteThrough(), 4);

  // Attempt 1 resumes from a checkpoint at step 3: it writes 3.. again.
  auto w0 = Open(0, 1);
  auto w1 = Open(1, 1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  // Both restarts applied: until worker_1's new attempt opens, the collector
  // cannot know of it, and its failed attempt's commits still count.
  ASSERT_TRUE(w0->Flush().ok());
  ASSERT_TRUE(w1->Flush().ok());
  WriteSteps(w0.get(), 0, 3, 6, 1);
  WriteSteps(w1.get(), 1, 3, 3, 1);
  // Steps 0-4 stayed complete; 5 and 6 wait for worker_1's new attempt
  // (what its failed attempt committed does not count).
  EXPECT_EQ(CompleteThrough(), 4);
  const v1::WorkerStatus s1 = StatusOf(1);
  EXPECT_EQ(s1.attempt(), 1u);
  EXPECT_EQ(s1.committed_through(), 3);
  EXPECT_EQ(s1.state(), v1::ACTIVE);
  ASSERT_EQ(s1.restarts_size(), 1);
  EXPECT_EQ(s1.restarts(0).attempt(), 1u);
  EXPECT_EQ(s1.restarts(0).previous_committed_through(), 6);
  EXPECT_GT(s1.restarts(0).started_unix(), 1.7e9);
  WriteSteps(w1.get(), 1, 4, 6, 1);
  EXPECT_EQ(CompleteThrough(), 6);
  ASSERT_TRUE(w1->Close(true).ok());
  ASSERT_TRUE(w0->Close(true).ok());

  // The rewritten steps hold attempt 1's values, the others attempt 0's.
  for (int worker = 0; worker < 2; ++worker) {
    for (uint64_t step = 0; step <= 6; ++step) {
      const uint32_t attempt = step >= 3 ? 1 : 0;
      EXPECT_EQ(ValueAt(worker, step), AsFloats(RecordOf(worker, step, attempt).data()))
          << "worker " << worker << " step " << step;
    }
  }
  auto steps = TrialOf("t").Steps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6}));

  // All of it survives a restart of the collector.
  Restart();
  const v1::WorkerStatus after = StatusOf(0);
  EXPECT_EQ(after.attempt(), 1u);
  ASSERT_EQ(after.restarts_size(), 1);
  EXPECT_EQ(after.restarts(0).previous_committed_through(), 4);
  EXPECT_EQ(StatusOf(1).restarts(0).previous_committed_through(), 6);
  EXPECT_EQ(after.state(), v1::CLOSED);
  EXPECT_EQ(ValueAt(0, 3), AsFloats(RecordOf(0, 3, 1).data()));
  EXPECT_EQ(ValueAt(1, 2), AsFloats(RecordOf(1, 2, 0).data()));
}

TEST_F(RestartAttemptTest, WithoutANewAttemptACommittedStepCannotChange) {
  {
    auto w0 = Open(0, 0, 1);
    ASSERT_NE(w0, nullptr);
    WriteSteps(w0.get(), 0, 0, 2, 0);
    ASSERT_TRUE(w0->Close(false).ok());
  }
  auto again = Open(0, 0, 1);
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(again->Write(RecordOf(0, 1, 7)).ok());
  const absl::Status s = again->Flush();
  EXPECT_EQ(GetReason(s), Reason::kConflict) << s;
  EXPECT_EQ(ValueAt(0, 1), AsFloats(RecordOf(0, 1, 0).data()));
}

TEST_F(RestartAttemptTest, AWriterOfASupersededAttemptIsRefused) {
  auto new_one = Open(0, 2, 1);
  ASSERT_NE(new_one, nullptr);
  WriteSteps(new_one.get(), 0, 0, 1, 2);
  ASSERT_TRUE(new_one->Close(false).ok());
  absl::Status error;
  auto old = Open(0, 1, 1, &error);
  if (old != nullptr) {  // refused at its first write if not at Open
    // (The refusal may fail the writer before this Write: then it returns it.)
    error = old->Write(RecordOf(0, 1, 1));
    if (error.ok()) error = old->Flush();
  }
  EXPECT_EQ(GetReason(error), Reason::kConflict) << error;
  EXPECT_THAT(std::string(error.message()), HasSubstr("superseded"));
  EXPECT_EQ(ValueAt(0, 1), AsFloats(RecordOf(0, 1, 2).data()));
  EXPECT_EQ(StatusOf(0).attempt(), 2u);
}

TEST_F(RestartAttemptTest, AClosedWorkerOfARunningTrialRestartsButAnEndedTrialDoesNot) {
  auto w0 = Open(0, 0);
  auto w1 = Open(1, 0);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  WriteSteps(w0.get(), 0, 0, 1, 0);
  WriteSteps(w1.get(), 1, 0, 1, 0);
  ASSERT_TRUE(w0->Close(true).ok());  // worker_0 finished; worker_1 runs on
  EXPECT_EQ(StatusOf(0).state(), v1::CLOSED);
  w0 = Open(0, 1);
  ASSERT_NE(w0, nullptr);
  ASSERT_TRUE(w0->Flush().ok());  // its Open is applied
  EXPECT_EQ(StatusOf(0).state(), v1::ACTIVE);
  EXPECT_EQ(StatusOf(0).committed_through(), -1);
  WriteSteps(w0.get(), 0, 0, 2, 1);
  ASSERT_TRUE(w0->Close(true).ok());
  ASSERT_TRUE(w1->Close(true).ok());  // now the trial ends
  auto summary = TrialOf("t").Summary();
  ASSERT_TRUE(summary.ok());
  ASSERT_TRUE(summary->ended());

  absl::Status error;
  auto late = Open(1, 1, 2, &error);
  if (late != nullptr) {
    // The refusal of its Open may fail the writer before this Write (a race
    // the writer cannot avoid): then the Write returns it.
    error = late->Write(RecordOf(1, 0, 1));
    if (error.ok()) error = late->Flush();
  }
  EXPECT_EQ(GetReason(error), Reason::kConflict) << error;
  EXPECT_THAT(std::string(error.message()), HasSubstr("has ended"));
  EXPECT_EQ(ValueAt(1, 0), AsFloats(RecordOf(1, 0, 0).data()));
  EXPECT_EQ(StatusOf(1).attempt(), 0u);
}

TEST_F(RestartAttemptTest, ARestartWaitsForTheFailedAttemptsStreamToEnd) {
  auto old = Open(0, 0, 1);
  ASSERT_NE(old, nullptr);
  WriteSteps(old.get(), 0, 0, 1, 0);
  // The new attempt opens while the old stream is still live (a launcher
  // restarting before the collector saw the failed process's stream end):
  // nothing it writes is durable until the old stream ended.
  auto fresh = Open(0, 1, 1);
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(fresh->Write(RecordOf(0, 0, 1)).ok());
  auto flushed = std::async(std::launch::async, [&] { return fresh->Flush(); });
  EXPECT_EQ(flushed.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  EXPECT_EQ(ValueAt(0, 0), AsFloats(RecordOf(0, 0, 0).data()));
  ASSERT_TRUE(old->Close(false).ok());
  ASSERT_EQ(flushed.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_TRUE(flushed.get().ok());
  ASSERT_TRUE(fresh->EndStep(0).ok());
  WriteSteps(fresh.get(), 0, 1, 2, 1);
  ASSERT_TRUE(fresh->Close(true).ok());
  EXPECT_EQ(ValueAt(0, 0), AsFloats(RecordOf(0, 0, 1).data()));
  EXPECT_EQ(StatusOf(0).attempt(), 1u);
  EXPECT_EQ(StatusOf(0).restarts_size(), 1);
}

}  // namespace
}  // namespace tensorkeep
