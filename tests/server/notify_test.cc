// Notifications leave the commit loop: waiters and watchers run on the
// Notifier's thread at a cost of what changed, their subscriptions are
// released when they end, and their numbers are capped (server/notifier.h).
// Against an in-process collector; waits are on conditions with bounds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "base/errors.h"
#include "gmock/gmock.h"
#include "proto/limits.pb.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;
using ::testing::HasSubstr;

class NotifyTest : public ::testing::Test {
 protected:
  void TearDown() override {
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void Start(const CollectorOptions& collector = {}) {
    dir_ = testing::MakeTempDir("notify");
    ServerOptions o;
    o.store.path = dir_ + "/db";
    o.collector = collector;
    testing::StartServer(o, &server_, &connection_);
  }
  std::unique_ptr<client::Writer> OpenWriter(const std::string& trial) {
    auto w = testing::OpenWriter(server_->address(), trial);
    if (w != nullptr) EXPECT_TRUE(w->Flush().ok());  // the trial exists from here
    return w;
  }
  client::Trial TrialOf(const std::string& name) { return client::Trial(connection_, name); }
  std::shared_ptr<Trial> CoreTrial(const std::string& name) {
    auto t = server_->collector()->GetTrial(name);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }
  // Waits (bounded) until `pred` holds.
  template <typename Pred>
  bool Eventually(Pred pred, double seconds = 20) {
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (!pred()) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

  std::string dir_;
  std::unique_ptr<CollectorServer> server_;
  std::shared_ptr<Connection> connection_;
};

// Steps [from, from + n).
std::vector<uint64_t> StepRange(uint64_t from, size_t n) {
  std::vector<uint64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

// The median, in ms, of `n` round trips of one record and a flush of `w`.
double MedianFlushMs(client::Writer* w, uint64_t* step, int n) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(w->Write(Float32Record("x", *step, 4, 1)).ok());
    EXPECT_TRUE(w->EndStep(*step).ok());
    EXPECT_TRUE(w->Flush().ok());
    ++*step;
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Issue 11, item 10: 16 waiters of 10^6 steps each raised the flush latency
// of an unrelated trial from 0.9 ms to 748 ms, because every commit of their
// trial re-walked their lists on the committer thread. (10^6 is now beyond
// MAX_WAIT_STEPS; the waiters ask for as many as allowed.)
TEST_F(NotifyTest, WaitersOnOneTrialDoNotSlowCommitsOfAnother) {
  Start();
  auto a = OpenWriter("a");
  auto b = OpenWriter("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // Trial a commits a step per flush, all along.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> a_commits{0};
  std::thread feeder([&] {
    for (uint64_t s = 0; !stop.load(); ++s) {
      if (!a->Write(Float32Record("x", s, 4, 1)).ok() || !a->EndStep(s).ok() || !a->Flush().ok()) {
        return;
      }
      a_commits.fetch_add(1);
    }
  });
  uint64_t b_step = 0;
  const int kFlushes = 30;
  const double without = MedianFlushMs(b.get(), &b_step, kFlushes);

  const int kWaiters = 16;
  const size_t kSteps = v1::MAX_WAIT_STEPS;
  std::vector<std::future<absl::Status>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] {
      // Steps a reaches only long after this test.
      return TrialOf("a").WaitForSteps(StepRange(1000000, kSteps), client::kGlobal, 120);
    }));
  }
  auto trial_a = CoreTrial("a");
  ASSERT_TRUE(Eventually([&] { return trial_a->watchers() == kWaiters; }))
      << trial_a->watchers() << " waiters registered";
  // A measurement counts only if trial a committed meanwhile (on a loaded
  // machine its feeder may not get the CPU during one round). The best of up
  // to three such rounds is kept: the regression this guards against slowed
  // every flush (748 ms against 0.9), while a burst of other tests' fsyncs on
  // CI's two cores slows one round, not three in a row.
  const double limit = 5 * without + 20;
  double with = 0;
  uint64_t commits_during = 0;
  int counted = 0;
  for (int round = 0; round < 10 && counted < 3 && !(counted > 0 && with < limit); ++round) {
    const uint64_t commits_before = a_commits.load();
    const double ms = MedianFlushMs(b.get(), &b_step, kFlushes);
    const uint64_t commits = a_commits.load() - commits_before;
    if (commits == 0) continue;
    if (counted == 0 || ms < with) with = ms;
    commits_during += commits;
    ++counted;
  }
  stop.store(true);
  feeder.join();
  std::printf(
      "flush latency of trial b (median of %d): %.2f ms without waiters, %.2f ms with %d "
      "waiters x %zu steps on trial a (best of %d rounds; %llu commits of a meanwhile)\n",
      kFlushes, without, with, kWaiters, kSteps, counted,
      static_cast<unsigned long long>(commits_during));
  EXPECT_GT(commits_during, 0u) << "trial a did not commit while b was measured";
  EXPECT_LT(with, limit) << "waiters on trial a slowed trial b's commits (best of " << counted
                         << " rounds)";

  ASSERT_TRUE(TrialOf("a").End().ok());
  for (auto& w : waiters) EXPECT_EQ(GetReason(w.get()), Reason::kNoMoreData);
  EXPECT_TRUE(Eventually([&] { return trial_a->watchers() == 0; }));
}

TEST_F(NotifyTest, WaitersAndWatchersOfAnEndedTrialAreReleased) {
  Start();
  auto w = OpenWriter("a");
  ASSERT_NE(w, nullptr);
  auto trial = CoreTrial("a");
  const size_t push_listeners = trial->listeners();  // the Push stream's, for stop requests

  auto wait = std::async(std::launch::async,
                         [&] { return TrialOf("a").WaitForSteps({100}, client::kGlobal, 60); });
  grpc::ClientContext watch_ctx;
  v1::WatchStepsRequest watch_req;
  watch_req.set_trial("a");
  auto watch = connection_->stub()->WatchSteps(&watch_ctx, watch_req);
  grpc::ClientContext rules_ctx;
  v1::WatchRuleStatusesRequest rules_req;
  rules_req.set_trial("a");
  auto rules = connection_->stub()->WatchRuleStatuses(&rules_ctx, rules_req);
  ASSERT_TRUE(Eventually([&] { return trial->watchers() == 3; })) << trial->watchers();
  EXPECT_EQ(server_->collector()->notifier()->watchers(), 3u);

  ASSERT_TRUE(TrialOf("a").End().ok());
  EXPECT_EQ(GetReason(wait.get()), Reason::kNoMoreData);
  v1::StepEvent event;
  ASSERT_TRUE(watch->Read(&event));
  EXPECT_TRUE(event.end_of_trial());
  EXPECT_TRUE(watch->Finish().ok());
  // A rule watch outlives the trial's end (rules report after it) until cancelled.
  EXPECT_TRUE(Eventually([&] { return trial->watchers() == 1; })) << trial->watchers();
  rules_ctx.TryCancel();
  v1::RuleStatus rs;
  while (rules->Read(&rs)) {
  }
  rules->Finish();
  EXPECT_TRUE(Eventually([&] { return trial->watchers() == 0; })) << trial->watchers();
  EXPECT_EQ(trial->listeners(), push_listeners);
  EXPECT_EQ(server_->collector()->notifier()->watchers(), 0u);
}

TEST_F(NotifyTest, WaiterThatTimesOutIsReleasedWithoutAnotherCommit) {
  Start();
  auto w = OpenWriter("a");
  ASSERT_NE(w, nullptr);
  auto trial = CoreTrial("a");
  const uint64_t version = trial->version();
  EXPECT_EQ(GetReason(TrialOf("a").WaitForSteps({5}, client::kGlobal, 0.2)), Reason::kTimeout);
  EXPECT_TRUE(Eventually([&] { return trial->watchers() == 0; })) << trial->watchers();
  EXPECT_EQ(trial->version(), version) << "nothing was committed meanwhile";
  EXPECT_EQ(server_->collector()->notifier()->watchers(), 0u);
}

TEST_F(NotifyTest, WatchersBeyondTheLimitsAreRefusedSayingWhich) {
  CollectorOptions o;
  o.max_watchers = 3;
  o.max_trial_watchers = 2;
  Start(o);
  std::vector<std::unique_ptr<client::Writer>> writers;
  for (const char* t : {"a", "b", "c"}) writers.push_back(OpenWriter(t));
  auto pending = [&](const std::string& t) {
    return std::async(std::launch::async,
                      [this, t] { return TrialOf(t).WaitForSteps({100}, client::kGlobal, 60); });
  };
  auto a1 = pending("a");
  auto a2 = pending("a");
  ASSERT_TRUE(Eventually([&] { return CoreTrial("a")->watchers() == 2; }));
  absl::Status third = TrialOf("a").WaitForSteps({100}, client::kGlobal, 60);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_THAT(third.message(), HasSubstr("MAX_TRIAL_WATCHERS"));
  // A watch counts as a waiter does.
  grpc::ClientContext ctx;
  v1::WatchStepsRequest req;
  req.set_trial("a");
  auto watch = connection_->stub()->WatchSteps(&ctx, req);
  v1::StepEvent event;
  EXPECT_FALSE(watch->Read(&event));
  grpc::Status refused = watch->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("MAX_TRIAL_WATCHERS"));

  auto b1 = pending("b");
  ASSERT_TRUE(Eventually([&] { return server_->collector()->notifier()->watchers() == 3; }));
  absl::Status over = TrialOf("c").WaitForSteps({100}, client::kGlobal, 60);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_THAT(over.message(), HasSubstr("MAX_WATCHERS"));

  // Ended waits free their slots.
  ASSERT_TRUE(TrialOf("a").End().ok());
  EXPECT_EQ(GetReason(a1.get()), Reason::kNoMoreData);
  EXPECT_EQ(GetReason(a2.get()), Reason::kNoMoreData);
  ASSERT_TRUE(Eventually([&] { return server_->collector()->notifier()->watchers() == 1; }));
  ASSERT_TRUE(TrialOf("c").End().ok());
  EXPECT_EQ(GetReason(TrialOf("c").WaitForSteps({100})), Reason::kNoMoreData);
  ASSERT_TRUE(TrialOf("b").End().ok());
  EXPECT_EQ(GetReason(b1.get()), Reason::kNoMoreData);
}

// A listener of every trial (the trial list's event streams) hears of a trial
// as it is created and of each commit to it, on the notifier thread; it takes a collector watcher slot, freed when
// its subscription goes.
TEST_F(NotifyTest, TrialsListenersHearOfNewAndChangedTrials) {
  CollectorOptions o;
  o.max_watchers = 1;
  Start(o);
  Notifier* notifier = server_->collector()->notifier();
  std::mutex mu;
  std::vector<std::string> heard;
  auto sub = notifier->WatchTrials([&](const std::shared_ptr<Trial>& t) {
    std::lock_guard<std::mutex> lock(mu);
    heard.push_back(t->name());
  });
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_TRUE(notifier->trials_watched());
  EXPECT_EQ(notifier->watchers(), 1u);
  auto over = notifier->WatchTrials([](const std::shared_ptr<Trial>&) {});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("MAX_WATCHERS"));
  auto count = [&](const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    return std::count(heard.begin(), heard.end(), name);
  };
  auto w = OpenWriter("new-trial");  // created, then a commit
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(Eventually([&] { return count("new-trial") >= 1; }));
  const auto before = count("new-trial");
  ASSERT_TRUE(w->Write(Float32Record("x", 0, 4, 1)).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  ASSERT_TRUE(w->Flush().ok());
  ASSERT_TRUE(Eventually([&] { return count("new-trial") > before; }));
  sub->reset();
  EXPECT_FALSE(notifier->trials_watched());
  EXPECT_EQ(notifier->watchers(), 0u);
  const auto after = count("new-trial");
  ASSERT_TRUE(w->Write(Float32Record("x", 1, 4, 1)).ok());
  ASSERT_TRUE(w->Flush().ok());
  ASSERT_TRUE(TrialOf("new-trial").End().ok());
  EXPECT_EQ(count("new-trial"), after);
}

// Many long waits hold their step lists as long as they wait: the lists draw
// on the memory budget (the caps bound the number of waits, not their size).
TEST_F(NotifyTest, TheStepListsOfWaitsDrawOnTheMemoryBudget) {
  CollectorOptions o;
  o.memory_budget_bytes = 16 << 20;
  Start(o);
  auto w = OpenWriter("a");
  ASSERT_NE(w, nullptr);
  // Each wait holds 2 x 8 bytes a step: 1.6 MB.
  const std::vector<uint64_t> steps = StepRange(1000, v1::MAX_WAIT_STEPS);
  MemoryBudget* budget = server_->collector()->memory();
  const size_t at_rest = budget->used();
  const size_t fit = (budget->limit() - at_rest) / (16 * v1::MAX_WAIT_STEPS);
  ASSERT_GE(fit, 3u) << at_rest << " bytes of the budget in use at rest";
  std::vector<std::future<absl::Status>> waits;
  for (size_t i = 0; i < fit; ++i) {
    waits.push_back(std::async(std::launch::async, [this, &steps] {
      return TrialOf("a").WaitForSteps(steps, client::kGlobal, 60);
    }));
  }
  ASSERT_TRUE(Eventually([&] { return CoreTrial("a")->watchers() == fit; }));
  EXPECT_GE(budget->used(), at_rest + fit * 16 * v1::MAX_WAIT_STEPS);
  absl::Status refused = TrialOf("a").WaitForSteps(steps, client::kGlobal, 60);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("memory budget"));
  EXPECT_THAT(refused.message(), HasSubstr("WaitForSteps"));
  // A short wait still fits, and ended waits give their room back.
  ASSERT_TRUE(TrialOf("a").End().ok());
  for (auto& f : waits) EXPECT_EQ(GetReason(f.get()), Reason::kNoMoreData);
  ASSERT_TRUE(Eventually([&] { return budget->used() == at_rest; }));
  EXPECT_EQ(GetReason(TrialOf("a").WaitForSteps(steps)), Reason::kNoMoreData);
}

TEST_F(NotifyTest, WaitForStepsTakesAtMostMaxWaitSteps) {
  Start();
  auto w = OpenWriter("a");
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->Write(Float32Record("x", 0, 4, 1)).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  ASSERT_TRUE(w->Flush().ok());
  absl::Status s = TrialOf("a").WaitForSteps(StepRange(0, v1::MAX_WAIT_STEPS + 1));
  EXPECT_EQ(GetReason(s), Reason::kBadRequest) << s;
  EXPECT_THAT(s.message(), HasSubstr("MAX_WAIT_STEPS"));
  // As many as allowed, repeated and out of order, are fine.
  std::vector<uint64_t> steps = StepRange(0, v1::MAX_WAIT_STEPS);
  std::reverse(steps.begin(), steps.end());
  steps[0] = 0;
  ASSERT_TRUE(TrialOf("a").End().ok());
  s = TrialOf("a").WaitForSteps(steps);
  EXPECT_EQ(GetReason(s), Reason::kNoMoreData) << s;
  EXPECT_THAT(s.message(), HasSubstr("before step 1"));
  EXPECT_TRUE(TrialOf("a").WaitForSteps({0, 0}).ok());
}

}  // namespace
}  // namespace tensorkeep
