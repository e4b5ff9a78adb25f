// Queries over a large trial hold its lock in slices (Trial::kStepsPerLockHold
// steps), so the committer, which applies every trial's writes on one thread,
// never waits for a whole walk; tensor_names of one mode walks no steps. And
// the answers across slices are those of one walk.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/trial.h"

namespace tensorkeep {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTrain = 1, kEval = 2;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Steps [0, n): TRAIN but every `eval_every`th (EVAL), mode steps counted per
// mode; "loss" at every step by worker_0 and, at even steps, worker_1 too;
// "acc" at every third step.
void Fill(Trial* trial, uint64_t n, uint64_t eval_every) {
  uint64_t train = 0, eval = 0;
  for (uint64_t s = 0; s < n; ++s) {
    const bool is_eval = eval_every != 0 && s % eval_every == eval_every - 1;
    const int mode = is_eval ? kEval : kTrain;
    const uint64_t ms = is_eval ? eval++ : train++;
    for (const char* worker : {"worker_0", "worker_1"}) {
      TrialUpdate u;
      u.worker = worker;
      u.num_workers = 2;
      if (worker[7] == '0' || s % 2 == 0)
        u.records.push_back(IndexedRecord{"loss", s, mode, ms, {}});
      if (worker[7] == '0' && s % 3 == 0)
        u.records.push_back(IndexedRecord{"acc", s, mode, ms, {}});
      u.committed_through = static_cast<int64_t>(s);
      trial->Apply(u);
    }
  }
}

// `worker` (of `num_workers`) saves "loss" at TRAIN step `step` and commits
// through `committed`.
void SaveLoss(Trial* trial, const char* worker, uint32_t num_workers, uint64_t step,
              int64_t committed) {
  TrialUpdate u;
  u.worker = worker;
  u.num_workers = num_workers;
  u.records.push_back(IndexedRecord{"loss", step, kTrain, step, {}});
  u.committed_through = committed;
  trial->Apply(u);
}

TEST(TrialLockTest, AnswersAcrossSlicesAreThoseOfOneWalk) {
  constexpr uint64_t n = 3 * Trial::kStepsPerLockHold + 123;
  Trial trial("t");
  Fill(&trial, n, 7);
  std::vector<uint64_t> eval_steps, acc_global, acc_train;
  uint64_t train = 0, eval = 0;
  for (uint64_t s = 0; s < n; ++s) {
    const bool is_eval = s % 7 == 6;
    const uint64_t ms = is_eval ? eval++ : train++;
    if (is_eval) eval_steps.push_back(ms);
    if (s % 3 == 0) acc_global.push_back(s);
    if (s % 3 == 0 && !is_eval) acc_train.push_back(ms);
  }
  EXPECT_EQ(*trial.Steps(kEval, false, "", 0, 0), eval_steps);
  EXPECT_EQ(*trial.Steps(kModeGlobal, false, "acc", 0, 0), acc_global);
  EXPECT_EQ(*trial.Steps(kTrain, false, "acc", 0, 0), acc_train);
  // A range inside the second slice and across the third.
  const uint64_t b = Trial::kStepsPerLockHold + 5, e = 3 * Trial::kStepsPerLockHold + 11;
  std::vector<uint64_t> ranged;
  for (uint64_t g : acc_global) {
    if (g >= b && g < e) ranged.push_back(g);
  }
  EXPECT_EQ(*trial.Steps(kModeGlobal, false, "acc", b, e), ranged);

  auto all = trial.LocateAll("loss", kModeGlobal, "", 0, 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), n);
  for (uint64_t s = 0; s < n; ++s) {
    ASSERT_EQ((*all)[s].global_step, s);
    ASSERT_EQ((*all)[s].worker, "worker_0");
  }
  auto w1 = trial.LocateAll("loss", kEval, "worker_1", 0, 0);
  ASSERT_TRUE(w1.ok());
  std::vector<uint64_t> got, want;
  for (const auto& l : *w1) got.push_back(l.global_step);
  for (uint64_t s = 0; s < n; ++s) {
    if (s % 7 == 6 && s % 2 == 0) want.push_back(s);
  }
  EXPECT_EQ(got, want);
  for (const auto& l : *w1) EXPECT_EQ(l.worker, "worker_1");

  auto names = trial.TensorNames(std::nullopt, kEval, {}, "");
  ASSERT_TRUE(names.ok());
  EXPECT_THAT(*names, ::testing::UnorderedElementsAre("acc", "loss"));
  auto predict = trial.TensorNames(std::nullopt, 3, {}, "");
  ASSERT_TRUE(predict.ok());
  EXPECT_TRUE(predict->empty());
  EXPECT_THAT(trial.Modes(), ::testing::ElementsAre(kTrain, kEval));
  EXPECT_THAT(trial.Summary().modes(), ::testing::ElementsAre(v1::TRAIN, v1::EVAL));
}

TEST(TrialLockTest, GlobalStepsAcrossSlicesAreThoseOfOneCopy) {
  // The global steps are copied a few slices' worth at a time: enough steps
  // for three copies, and steps that worker_1 saved late (below worker_0's).
  constexpr uint64_t n = 3 * 8 * Trial::kStepsPerLockHold + 78;  // even: n - 1 is odd
  Trial trial("t");
  // worker_0 saves the even steps, worker_1 the odd ones, but only after
  // worker_0 is done: all of them late. Both commit through n - 1.
  for (uint64_t s = 0; s < n; s += 2) SaveLoss(&trial, "worker_0", 2, s, static_cast<int64_t>(s));
  for (uint64_t s = 1; s < n; s += 2) SaveLoss(&trial, "worker_1", 2, s, static_cast<int64_t>(s));
  SaveLoss(&trial, "worker_0", 2, n + 10,
           static_cast<int64_t>(n + 10));  // incomplete (worker_1 at n - 1)
  std::vector<uint64_t> all(n);
  for (uint64_t s = 0; s < n; ++s) all[s] = s;
  EXPECT_EQ(*trial.Steps(kModeGlobal, false, "", 0, 0), all);
  std::vector<uint64_t> with_incomplete = all;
  with_incomplete.push_back(n + 10);
  EXPECT_EQ(*trial.Steps(kModeGlobal, true, "", 0, 0), with_incomplete);
  // Ranges ending on, just before and just after a slice's end.
  const uint64_t slice = 8 * Trial::kStepsPerLockHold;
  for (uint64_t b : {uint64_t{0}, uint64_t{3}, slice - 1, slice}) {
    for (uint64_t e : {slice, slice + 1, 2 * slice - 1, 2 * slice + 5, n + 100}) {
      std::vector<uint64_t> want;
      for (uint64_t s = b; s < std::min(e, n); ++s) want.push_back(s);
      EXPECT_EQ(*trial.Steps(kModeGlobal, false, "", b, e), want) << b << ".." << e;
    }
  }
}

TEST(TrialLockTest, TensorNamesOfAModeWalksNoSteps) {
  // Every step TRAIN: asking EVAL names walked each tensor's steps to find
  // none (129 ms for 1,000,000 steps, under the lock; a hundred tensors of
  // 10,000,000 steps would have been minutes).
  constexpr uint64_t n = 1000000;
  Trial trial("t");
  Fill(&trial, n, 0);
  const auto t0 = Clock::now();
  auto all = trial.LocateAll("loss", kModeGlobal, "", 0, 0);
  const double walk = SecondsSince(t0);
  ASSERT_TRUE(all.ok() && all->size() == n);
  const auto t1 = Clock::now();
  auto names = trial.TensorNames(std::nullopt, kEval, {}, "");
  const double eval_names = SecondsSince(t1);
  ASSERT_TRUE(names.ok());
  EXPECT_TRUE(names->empty());
  // The trial's modes (in every summary a listing of trials returns) walked
  // every step too.
  const auto t2 = Clock::now();
  const v1::TrialSummary summary = trial.Summary();
  const std::vector<int> modes = trial.Modes();
  const double summary_and_modes = SecondsSince(t2);
  EXPECT_THAT(summary.modes(), ::testing::ElementsAre(v1::TRAIN));
  EXPECT_THAT(modes, ::testing::ElementsAre(kTrain));
  std::printf(
      "LocateAll of 1,000,000 steps %.4f s; EVAL tensor names %.6f s; summary and modes %.6f s\n",
      walk, eval_names, summary_and_modes);
  EXPECT_LT(eval_names, walk / 20);
  EXPECT_LT(summary_and_modes, walk / 20);
}

TEST(TrialLockTest, TheCommitterWaitsForASliceNotForAWholeWalk) {
  constexpr uint64_t n = 2000000;
  Trial trial("t");
  Fill(&trial, n / 2, 0);
  // A second trial's worth of updates to this one, as the committer applies
  // them, while readers walk every step.
  std::atomic<bool> done{false};
  double walks = 0;
  int walks_done = 0;
  std::thread reader([&] {
    const auto start = Clock::now();
    while (walks_done < 3) {
      auto all = trial.LocateAll("loss", kModeGlobal, "", 0, 0);
      ASSERT_TRUE(all.ok());
      ++walks_done;
    }
    walks = SecondsSince(start) / walks_done;
    done = true;
  });
  double longest = 0;
  uint64_t s = n / 2;
  while (!done) {
    TrialUpdate u;
    u.worker = "worker_0";
    u.num_workers = 2;
    u.records.push_back(IndexedRecord{"loss", s, kTrain, s, {}});
    const auto t = Clock::now();
    trial.Apply(u);
    longest = std::max(longest, SecondsSince(t));
    ++s;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  reader.join();
  std::printf("a walk of %llu steps %.3f s; the longest Apply meanwhile %.4f s\n",
              static_cast<unsigned long long>(n / 2), walks, longest);
  // Holding the lock for the whole walk, an Apply waited about a walk (the
  // reader starts the next walk while the writer sleeps).
  EXPECT_LT(longest, walks / 2);
}

TEST(TrialLockTest, AReaderListingStepsInALoopDoesNotStarveTheCommitter) {
  // A client listing a large trial's global steps again and again: each
  // listing releases the lock between slices, but a reader that took it
  // again at once kept out the committer being woken for it. It waited for
  // 0.5-0.8 s at a time on 3,000,000 steps (10-16 writes in 200 listings).
  constexpr uint64_t n = 1000000;
  constexpr int kListings = 500;
  Trial trial("t");
  for (uint64_t s = 0; s < n; ++s) SaveLoss(&trial, "worker_0", 1, s, static_cast<int64_t>(s));
  std::atomic<bool> done{false};
  double reading = 0;
  std::thread reader([&] {
    const auto start = Clock::now();
    for (int i = 0; i < kListings; ++i) {
      auto all = trial.Steps(kModeGlobal, false, "", 0, 0);
      ASSERT_TRUE(all.ok());
      ASSERT_GE(all->size(), n);
    }
    reading = SecondsSince(start);
    done = true;
  });
  double longest = 0;
  int applied = 0;
  for (uint64_t s = n; !done; ++s, ++applied) {
    const auto t = Clock::now();
    SaveLoss(&trial, "worker_0", 1, s, static_cast<int64_t>(s));
    longest = std::max(longest, SecondsSince(t));
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  reader.join();
  std::printf("%d listings of %llu steps %.3f s; %d writes meanwhile, the longest %.4f s\n",
              kListings, static_cast<unsigned long long>(n), reading, applied, longest);
  EXPECT_LT(longest, reading / 20);
}

}  // namespace
}  // namespace tensorkeep
