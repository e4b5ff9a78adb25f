// The commit loop as the one owner of shared trial state, and what a failed
// write leaves behind — tested on the core (Collector, WriteSession,
// Committer) without gRPC, on a LevelDB MemEnv with injected faults.
#include "server/committer.h"

#include <future>
#include <thread>
#include <vector>

#include "base/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "leveldb/helpers/memenv.h"
#include "server/collector.h"
#include "server/validation.h"
#include "server/write_session.h"
#include "storage/leveldb_tensor_store.h"
#include "tests/server/test_server.h"
#include "tests/storage/fault_env.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;
using ::testing::HasSubstr;

// One writer's Push stream, without gRPC: messages go through a WriteSession
// and their writes through the committer, as PushReactor does.
class Stream {
 public:
  explicit Stream(Collector* c) : collector_(c), session_(std::make_unique<WriteSession>(c)) {}
  // Handles `m` (seq filled in) and waits until its write is durable.
  absl::Status Send(v1::PushRequest m) {
    m.set_seq(++seq_);
    auto out = session_->Handle(m);
    if (!out.ok()) return out.status();
    if (!out->write.has_value()) return absl::OkStatus();
    std::promise<absl::Status> done;
    auto result = done.get_future();
    out->write->done = [&done](const absl::Status& s) { done.set_value(s); };
    collector_->Submit(std::move(*out->write));
    return result.get();
  }
  absl::Status Open(const std::string& trial, const std::string& worker, uint32_t n = 1,
                    bool resume = false) {
    v1::PushRequest m;
    m.mutable_open()->set_trial(trial);
    m.mutable_open()->set_worker(worker);
    m.mutable_open()->set_num_workers(n);
    m.mutable_open()->set_resume(resume);
    return Send(m);
  }
  absl::Status Records(std::vector<v1::TensorRecord> records) {
    v1::PushRequest m;
    for (auto& r : records) *m.mutable_records()->add_records() = std::move(r);
    return Send(m);
  }
  absl::Status EndStep(uint64_t step) {
    v1::PushRequest m;
    m.mutable_end_step()->set_step(step);
    return Send(m);
  }
  absl::Status Close(bool end_of_training) {
    v1::PushRequest m;
    m.mutable_close()->set_end_of_training(end_of_training);
    return Send(m);
  }

 private:
  Collector* collector_;
  std::unique_ptr<WriteSession> session_;
  uint64_t seq_ = 0;
};

class CommitterTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Open()); }
  void TearDown() override { Close(); }

  void Open() {
    LevelDbOptions o;
    o.path = "/db";
    o.env = &env_;
    o.write_buffer_size = write_buffer_size_;
    o.reopen_interval_seconds = 0;
    auto store = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    CollectorOptions co;
    co.sync = sync_;
    co.max_trials = max_trials_;
    co.max_steps_per_trial = max_steps_per_trial_;
    auto c = Collector::Create(co, store_.get());
    ASSERT_TRUE(c.ok()) << c.status();
    collector_ = std::move(*c);
  }
  void Close() {
    collector_.reset();
    store_.reset();
  }
  void PowerCut(bool flush_fails);
  void Restart() {
    Close();
    ASSERT_NO_FATAL_FAILURE(Open());
  }
  std::shared_ptr<Trial> GetTrial(const std::string& name) {
    auto t = collector_->GetTrial(name);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }
  // The stored bytes of `tensor` at global step `step`, written by `worker`.
  std::string ValueOf(const std::string& trial, const std::string& tensor, uint64_t step,
                      const std::string& worker = "worker_0") {
    auto t = GetTrial(trial);
    if (t == nullptr) return "";
    auto where = t->Locate(tensor, step, 4, worker);
    if (!where.ok()) return "missing: " + where.status().ToString();
    auto v = collector_->ReadValue(*t, tensor, *where);
    return v.ok() ? v->data : "unreadable: " + v.status().ToString();
  }

  std::unique_ptr<leveldb::Env> mem_{leveldb::NewMemEnv(leveldb::Env::Default())};
  testing::FaultEnv env_{mem_.get()};
  bool sync_ = false;
  size_t write_buffer_size_ = 4 << 20;
  size_t max_trials_ = kMaxTrials;
  size_t max_steps_per_trial_ = kMaxStepsPerTrial;
  std::unique_ptr<LevelDbTensorStore> store_;
  std::unique_ptr<Collector> collector_;
};

TEST_F(CommitterTest, TwoWorkersGivingOneStepTwoModesConflictNamingBoth) {
  Stream a(collector_.get()), b(collector_.get());
  ASSERT_TRUE(a.Open("t", "worker_0", 2).ok());
  ASSERT_TRUE(b.Open("t", "worker_1", 2).ok());
  ASSERT_TRUE(a.Records({Float32Record("x", 5, 4, 1, /*mode=*/1, /*mode_step=*/5)}).ok());
  absl::Status s = b.Records({Float32Record("x", 5, 4, 2, /*mode=*/2, /*mode_step=*/0)});
  EXPECT_EQ(GetReason(s), Reason::kConflict) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("step 5 of trial 't' is TRAIN step 5"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("as EVAL step 0"));
  auto info = GetTrial("t")->GetStep(5);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->mode, 1);
  // Nothing of the refused write is in the index: worker_1 saved nothing.
  EXPECT_EQ(GetTrial("t")->TensorWorkers("x", 5, 4).value(), std::vector<std::string>{"worker_0"});
}

TEST_F(CommitterTest, OneModeStepIsOneGlobalStep) {
  Stream a(collector_.get()), b(collector_.get());
  ASSERT_TRUE(a.Open("t", "worker_0", 2).ok());
  ASSERT_TRUE(b.Open("t", "worker_1", 2).ok());
  ASSERT_TRUE(a.Records({Float32Record("x", 10, 4, 1, 1, 5)}).ok());
  absl::Status s = b.Records({Float32Record("x", 11, 4, 1, 1, 5)});
  EXPECT_EQ(GetReason(s), Reason::kConflict) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("TRAIN step 5 of trial 't' is global step 10"));
  EXPECT_EQ(GetTrial("t")->FindGlobalStep(1, 5), std::optional<uint64_t>(10));
  EXPECT_FALSE(GetTrial("t")->GetStep(11).has_value());
}

TEST_F(CommitterTest, RacingWritersOfContradictingModesNeverBothWin) {
  Stream a(collector_.get()), b(collector_.get());
  ASSERT_TRUE(a.Open("t", "worker_0", 2).ok());
  ASSERT_TRUE(b.Open("t", "worker_1", 2).ok());
  int both = 0, neither = 0;
  for (uint64_t step = 0; step < 200; ++step) {
    absl::Status sa, sb;
    std::thread ta([&] { sa = a.Records({Float32Record("x", step, 4, 1, 1, step)}); });
    std::thread tb([&] { sb = b.Records({Float32Record("x", step, 4, 2, 2, step)}); });
    ta.join();
    tb.join();
    if (sa.ok() && sb.ok()) ++both;
    if (!sa.ok() && !sb.ok()) ++neither;
    // Whoever won, the index says what the winner wrote.
    auto info = GetTrial("t")->GetStep(step);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->mode, sa.ok() ? 1 : 2);
    if (!sa.ok() || !sb.ok()) {
      // A stream whose write failed is done; the test goes on with new ones.
      if (!sa.ok()) {
        a = Stream(collector_.get());
        ASSERT_TRUE(a.Open("t", "worker_0", 2).ok());
      }
      if (!sb.ok()) {
        b = Stream(collector_.get());
        ASSERT_TRUE(b.Open("t", "worker_1", 2).ok());
      }
    }
  }
  EXPECT_EQ(both, 0);
  EXPECT_EQ(neither, 0);
}

TEST_F(CommitterTest, ASecondLiveStreamForOneWorkerIsRefusedUntilTheFirstEnds) {
  auto first = std::make_unique<Stream>(collector_.get());
  ASSERT_TRUE(first->Open("t", "worker_0").ok());
  // Another process's first stream: refused for good (retrying cannot help).
  Stream second(collector_.get());
  absl::Status s = second.Open("t", "worker_0");
  EXPECT_EQ(GetReason(s), Reason::kConflict) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("already has a live Push stream"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("worker_<rank>"));
  // A writer's later stream (its old one not seen to end yet): retried.
  Stream resumed(collector_.get());
  s = resumed.Open("t", "worker_0", 1, /*resume=*/true);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("once the collector has seen the old stream end"));
  first.reset();  // the stream ends (PushReactor::OnDone deletes its session)
  Stream third(collector_.get());
  EXPECT_TRUE(third.Open("t", "worker_0").ok());
}

TEST_F(CommitterTest, AFailedWriteChangesNothingInMemoryAndTheResendIsKept) {
  auto s1 = std::make_unique<Stream>(collector_.get());
  ASSERT_TRUE(s1->Open("t", "worker_0").ok());
  ASSERT_TRUE(s1->Records({Float32Record("x", 0, 4, 1)}).ok());
  ASSERT_TRUE(s1->EndStep(0).ok());
  // The disk fails the index write of step 1 (a short write, as ENOSPC
  // leaves): nothing of it may show, and the stream's later messages fail
  // without being written (EndStep(1) would commit the lost step).
  env_.FailAppends(".log", 1, /*short_write=*/true);
  absl::Status failed = s1->Records({Float32Record("x", 1, 4, 2)});
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.message()), HasSubstr("No space left on device"));
  EXPECT_EQ(s1->EndStep(1).message(), failed.message());
  auto t = GetTrial("t");
  EXPECT_EQ(t->CommittedThrough("worker_0"), 0);
  EXPECT_FALSE(t->GetStep(1).has_value());
  s1.reset();
  {
    // The writer reconnects and resends; the store reopens its database first.
    Stream s2(collector_.get());
    ASSERT_TRUE(s2.Open("t", "worker_0").ok());
    ASSERT_TRUE(s2.Records({Float32Record("x", 1, 4, 2)}).ok());
    ASSERT_TRUE(s2.EndStep(1).ok());
    for (int step = 2; step < 40; ++step) {  // more writes after the torn record
      ASSERT_TRUE(s2.Records({Float32Record("x", step, 4, step + 1)}).ok());
    }
    ASSERT_TRUE(s2.Close(true).ok());
  }
  ASSERT_NO_FATAL_FAILURE(Restart());
  for (int step = 0; step < 40; ++step) {
    EXPECT_EQ(ValueOf("t", "x", step), Float32Record("x", step, 4, step + 1).data())
        << "step " << step;
  }
  EXPECT_TRUE(GetTrial("t")->ended());
}

TEST_F(CommitterTest, ATrialWhoseFirstWriteFailedNeitherBlocksStartUpNorLosesItsMetadata) {
  env_.FailAppends(".log", 1);
  {
    Stream s(collector_.get());
    EXPECT_FALSE(s.Open("new", "worker_0", 3).ok());
  }
  {
    Stream s(collector_.get());
    ASSERT_TRUE(s.Open("new", "worker_0", 3).ok());
    ASSERT_TRUE(s.Records({Float32Record("x", 0, 4, 1)}).ok());
  }
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_EQ(GetTrial("new")->num_workers(), 3u);
  EXPECT_EQ(ValueOf("new", "x", 0), Float32Record("x", 0, 4, 1).data());
}

TEST_F(CommitterTest, RefusedWritesUntilTheFaultClearsThenServingAgain) {
  Stream s1(collector_.get());
  ASSERT_TRUE(s1.Open("t", "worker_0").ok());
  // Every index write fails for a while (a full disk): each attempt is refused
  // with the cause, and reads of what is stored go on.
  ASSERT_TRUE(s1.Records({Float32Record("x", 0, 4, 1)}).ok());
  env_.FailAppends(".log", 1000);
  EXPECT_FALSE(s1.Records({Float32Record("x", 1, 4, 2)}).ok());
  for (int i = 0; i < 5; ++i) {
    Stream s(collector_.get());
    absl::Status open = s.Open("t", "worker_1");
    EXPECT_FALSE(open.ok());
    EXPECT_THAT(std::string(open.message()), HasSubstr("No space left on device"));
  }
  EXPECT_EQ(ValueOf("t", "x", 0), Float32Record("x", 0, 4, 1).data());
  env_.FailAppends(".log", 0);
  Stream s2(collector_.get());
  ASSERT_TRUE(s2.Open("t", "worker_1", 1).ok());
  ASSERT_TRUE(s2.Records({Float32Record("y", 0, 4, 3)}).ok());
  EXPECT_EQ(ValueOf("t", "y", 0, "worker_1"), Float32Record("y", 0, 4, 3).data());
}

// Worker ids are 16-bit in the index: the 65,536th worker used to alias
// worker 0 (whose acknowledged values then read as INTERNAL errors).
TEST_F(CommitterTest, ATrialHoldsAtMostTheLimitOfWorkers) {
  for (uint32_t i = 0; i < kMaxWorkers; ++i) {
    Stream s(collector_.get());
    ASSERT_TRUE(s.Open("t", "w" + std::to_string(i)).ok()) << i;
    if (i == 0) ASSERT_TRUE(s.Records({Float32Record("x", 0, 4, 9)}).ok());
  }
  Stream one_more(collector_.get());
  absl::Status refused = one_more.Open("t", "w" + std::to_string(kMaxWorkers));
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("the most one trial may have"));
  // A worker it holds comes back; worker 0's value is intact.
  Stream again(collector_.get());
  EXPECT_TRUE(again.Open("t", "w0").ok());
  EXPECT_EQ(ValueOf("t", "x", 0, "w0"), Float32Record("x", 0, 4, 9).data());
  EXPECT_EQ(GetTrial("t")->Workers().size(), kMaxWorkers);
}

TEST_F(CommitterTest, ATrialHoldsAtMostTheLimitOfTensorNames) {
  Stream s(collector_.get());
  ASSERT_TRUE(s.Open("t", "worker_0").ok());
  // Scalars under distinct names, in messages of 10,000, up to the limit.
  const auto scalars = [](uint64_t step, size_t from, size_t n) {
    std::vector<v1::TensorRecord> out;
    for (size_t i = from; i < from + n; ++i) {
      out.push_back(Float32Record("n" + std::to_string(i), step, 1, 1));
    }
    return out;
  };
  for (size_t i = 0; i < kMaxTensorNamesPerTrial; i += 10000) {
    ASSERT_TRUE(s.Records(scalars(0, i, 10000)).ok()) << i;
  }
  // Names it holds may be saved again at later steps ...
  ASSERT_TRUE(s.Records(scalars(1, 0, 100)).ok());
  // ... but one more name is refused, saying which limit.
  absl::Status refused = s.Records(scalars(2, kMaxTensorNamesPerTrial, 1));
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("limit of 100000 names a trial"));
  EXPECT_EQ(GetTrial("t")->Summary().num_tensors(), kMaxTensorNamesPerTrial);
  // Other trials are not affected.
  Stream other(collector_.get());
  ASSERT_TRUE(other.Open("u", "worker_0").ok());
  EXPECT_TRUE(other.Records(scalars(0, 0, 10)).ok());
}

TEST_F(CommitterTest, ACollectorHoldsAtMostTheLimitOfTrials) {
  max_trials_ = 3;
  ASSERT_NO_FATAL_FAILURE(Restart());
  for (int i = 0; i < 3; ++i) {
    Stream s(collector_.get());
    ASSERT_TRUE(s.Open("t" + std::to_string(i), "worker_0").ok()) << i;
    ASSERT_TRUE(s.Records({Float32Record("x", 0, 4, i)}).ok()) << i;
  }
  Stream one_more(collector_.get());
  absl::Status refused = one_more.Open("t3", "worker_0");
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("holds 3 trials"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("'t3'"));
  EXPECT_FALSE(collector_->GetTrial("t3").ok()) << "a refused trial is not created";
  // The trials it holds take writers and keep their data, also after a restart.
  ASSERT_NO_FATAL_FAILURE(Restart());
  Stream again(collector_.get());
  EXPECT_TRUE(again.Open("t1", "worker_1").ok());
  EXPECT_EQ(ValueOf("t2", "x", 0), Float32Record("x", 0, 4, 2).data());
  Stream still(collector_.get());
  EXPECT_TRUE(absl::IsResourceExhausted(still.Open("t3", "worker_0")));
}

TEST_F(CommitterTest, ATrialHoldsAtMostTheLimitOfSteps) {
  max_steps_per_trial_ = 5;
  ASSERT_NO_FATAL_FAILURE(Restart());
  Stream s(collector_.get());
  ASSERT_TRUE(s.Open("t", "worker_0").ok());
  for (uint64_t step = 0; step < 4; ++step) {
    ASSERT_TRUE(s.Records({Float32Record("x", step, 4, 1)}).ok()) << step;
  }
  // A message adding two steps when one is left is refused whole.
  absl::Status refused = s.Records({Float32Record("x", 4, 4, 1), Float32Record("x", 5, 4, 1)});
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("holds 4 steps; 2 more"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("MAX_STEPS_PER_TRIAL"));
  EXPECT_EQ(GetTrial("t")->StepCount(), 4u);
  // A refused write fails its stream's later writes (nothing after it may be
  // acknowledged); a new stream fills the last step and is then refused.
  Stream s2(collector_.get());
  ASSERT_TRUE(s2.Open("t", "worker_1").ok());
  EXPECT_TRUE(s2.Records({Float32Record("y", 2, 4, 1)}).ok()) << "a step it holds";
  EXPECT_TRUE(s2.Records({Float32Record("y", 4, 4, 1)}).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(s2.Records({Float32Record("y", 6, 4, 1)})));
  EXPECT_EQ(GetTrial("t")->StepCount(), 5u);
  // Other trials are not affected.
  Stream other(collector_.get());
  ASSERT_TRUE(other.Open("u", "worker_0").ok());
  EXPECT_TRUE(other.Records({Float32Record("x", 9, 4, 1)}).ok());
}

// LevelDB closes a rotated log without fsync and relies on the flush of its
// memtable to a (synced) table: until that flush lands, the log is all there
// is. With --sync the committer must not leave an acknowledged write in a log
// that a later fsync does not cover. Power cut as LevelDB's fault-injection
// test does it: every byte not synced is dropped, then every acknowledged
// write must be there. `flush_fails` keeps the memtable flushes from landing
// (their table writes fail), which is the window a real power cut may hit.
void CommitterTest::PowerCut(bool flush_fails) {
  Close();
  sync_ = true;
  write_buffer_size_ = 64 << 10;  // many log rotations
  ASSERT_NO_FATAL_FAILURE(Open());
  if (flush_fails) env_.FailAppends(".ldb", 1 << 30);
  constexpr int kWriters = 4, kSteps = 150;
  std::vector<std::thread> threads;
  std::vector<int> acked(kWriters, -1);
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      Stream s(collector_.get());
      const std::string worker = "worker_" + std::to_string(w);
      if (!s.Open("t", worker, kWriters).ok()) return;
      for (int step = 0; step < kSteps; ++step) {
        // Small records (index only: they fill LevelDB's memtable, so its
        // log rotates often) and a large one (value log).
        std::vector<v1::TensorRecord> records;
        for (int i = 0; i < 24; ++i) {
          records.push_back(Float32Record("small" + std::to_string(i), step, 8, step * 10 + w));
        }
        records.push_back(Float32Record("large", step, 2048, step * 10 + w));
        if (!s.Records(std::move(records)).ok()) return;
        acked[w] = step;
      }
    });
  }
  for (auto& t : threads) t.join();
  int total = 0;
  for (int w = 0; w < kWriters; ++w) total += acked[w] + 1;
  if (flush_fails) {
    EXPECT_GT(env_.appends_failed(), 0) << "no memtable flush was attempted: no log rotated";
  } else {
    EXPECT_EQ(total, kWriters * kSteps);
  }
  Close();
  env_.FailAppends("", 0);
  env_.DropUnsyncedData();
  ASSERT_NO_FATAL_FAILURE(Open());
  int missing = 0;
  for (int w = 0; w < kWriters; ++w) {
    for (int step = 0; step <= acked[w]; ++step) {
      const std::string worker = "worker_" + std::to_string(w);
      for (int i = 0; i <= 24; ++i) {
        const std::string name = i < 24 ? "small" + std::to_string(i) : "large";
        const int n = i < 24 ? 8 : 2048;
        if (ValueOf("t", name, step, worker) !=
            Float32Record(name, step, n, step * 10 + w).data()) {
          ++missing;
        }
      }
    }
  }
  EXPECT_EQ(missing, 0) << "acknowledged records lost by the power cut, of " << total
                        << " acknowledged steps";
}

TEST_F(CommitterTest, WithSyncEveryAcknowledgedWriteSurvivesAPowerCut) { PowerCut(false); }

TEST_F(CommitterTest, WithSyncAPowerCutBeforeTheMemtableFlushLosesNothingAcknowledged) {
  PowerCut(true);
}

}  // namespace
}  // namespace tensorkeep

namespace tensorkeep {
namespace {

class WorkerStateTest : public CommitterTest {
 protected:
  absl::StatusOr<v1::WorkerStatus> DeclareLost(const std::string& trial,
                                               const std::string& worker) {
    std::promise<absl::StatusOr<v1::WorkerStatus>> done;
    auto result = done.get_future();
    collector_->DeclareWorkerLost(
        trial, worker, [&done](absl::StatusOr<v1::WorkerStatus> s) { done.set_value(s); });
    return result.get();
  }
  std::optional<WorkerState> StateOf(const std::string& trial, const std::string& worker) {
    return GetTrial(trial)->StateOf(worker);
  }
};

TEST_F(WorkerStateTest, AnOpenWithAnotherNumWorkersIsAConflictNamingBoth) {
  Stream a(collector_.get());
  ASSERT_TRUE(a.Open("t", "worker_0", 4).ok());
  {
    Stream b(collector_.get());
    absl::Status s = b.Open("t", "worker_1", 2);
    EXPECT_EQ(GetReason(s), Reason::kConflict) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("num_workers 2"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("num_workers 4"));
  }                                                    // its stream ends
  EXPECT_FALSE(StateOf("t", "worker_1").has_value());  // nothing of it stored
  Stream c(collector_.get());
  EXPECT_TRUE(c.Open("t", "worker_1", 4).ok());
}

TEST_F(WorkerStateTest, LostStateIsDurableAndAnOpenMakesItActiveAgain) {
  {
    Stream a(collector_.get());
    Stream b(collector_.get());
    ASSERT_TRUE(a.Open("t", "worker_0", 2).ok());
    ASSERT_TRUE(b.Open("t", "worker_1", 2).ok());
    ASSERT_TRUE(a.Records({Float32Record("x", 0, 4, 1), Float32Record("x", 5, 4, 1)}).ok());
    ASSERT_TRUE(a.EndStep(5).ok());
    ASSERT_TRUE(b.Records({Float32Record("x", 0, 4, 2)}).ok());
    ASSERT_TRUE(b.EndStep(0).ok());
  }
  EXPECT_EQ(GetTrial("t")->HasPassedStep(5, 4), StepState::kNotYetAvailable);
  auto lost = DeclareLost("t", "worker_1");
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(lost->state(), v1::LOST);
  EXPECT_EQ(lost->reason(), "declared lost by an operator");
  EXPECT_EQ(GetTrial("t")->HasPassedStep(5, 4), StepState::kAvailable);
  EXPECT_EQ(GetReason(DeclareLost("t", "nobody").status()), Reason::kInvalidWorker);
  EXPECT_TRUE(DeclareLost("t", "worker_1").ok());  // again: no change, no error

  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_EQ(StateOf("t", "worker_1"), WorkerState::kLost);
  EXPECT_EQ(StateOf("t", "worker_0"), WorkerState::kActive);
  EXPECT_EQ(GetTrial("t")->HasPassedStep(5, 4), StepState::kAvailable);
  {
    Stream b(collector_.get());
    ASSERT_TRUE(b.Open("t", "worker_1", 2).ok());
    EXPECT_EQ(StateOf("t", "worker_1"), WorkerState::kActive);
  }
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_EQ(StateOf("t", "worker_1"), WorkerState::kActive);
  EXPECT_EQ(GetTrial("t")->HasPassedStep(5, 4), StepState::kAvailable);  // never back
}

TEST_F(WorkerStateTest, TheEndByLostWorkersIsDurableAndFinal) {
  {
    Stream a(collector_.get());
    Stream b(collector_.get());
    ASSERT_TRUE(a.Open("t", "worker_0", 2).ok());
    ASSERT_TRUE(b.Open("t", "worker_1", 2).ok());
    ASSERT_TRUE(a.Records({Float32Record("x", 0, 4, 1)}).ok());
    ASSERT_TRUE(a.Close(/*end_of_training=*/true).ok());
  }
  EXPECT_FALSE(GetTrial("t")->ended());
  ASSERT_TRUE(DeclareLost("t", "worker_1").ok());
  EXPECT_TRUE(GetTrial("t")->ended());
  EXPECT_EQ(DeclareLost("t", "worker_0").status().code(), absl::StatusCode::kFailedPrecondition);
  {
    Stream b(collector_.get());  // comes back: the trial has ended, for good
    EXPECT_EQ(GetReason(b.Open("t", "worker_1", 2)), Reason::kConflict);
  }
  EXPECT_TRUE(GetTrial("t")->ended());
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_TRUE(GetTrial("t")->ended());
  EXPECT_EQ(StateOf("t", "worker_1"), WorkerState::kLost);
}

}  // namespace
}  // namespace tensorkeep
