// StepList (a trial's global steps for listing) and Trial::Steps over it:
// every order of arrival lists the same steps, and steps that arrive before
// those already saved cost what appended ones cost, not a move of every later
// step (that was quadratic on the committer's thread).
#include "server/step_list.h"

#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/trial.h"

namespace tensorkeep {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint64_t> Range(const StepList& list, uint64_t begin, uint64_t last) {
  std::vector<uint64_t> out;
  list.AppendRange(begin, last, &out);
  return out;
}

std::vector<uint64_t> Expected(const std::set<uint64_t>& steps, uint64_t begin, uint64_t last) {
  if (last < begin) return {};
  return std::vector<uint64_t>(steps.lower_bound(begin), steps.upper_bound(last));
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(StepListTest, ListsWhatASetHoldsWhateverTheOrderOfArrival) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    StepList list;
    std::set<uint64_t> steps;
    // Mostly increasing, with late steps below the highest: sometimes one,
    // sometimes whole runs (enough to merge several times).
    uint64_t next = 1000;
    const int n = 2000 + round * 500;
    for (int i = 0; i < n; ++i) {
      uint64_t step;
      if (rng() % 3 == 0) {
        step = rng() % next;  // late
      } else {
        step = next;
        next += 1 + rng() % 3;
      }
      if (!steps.insert(step).second) continue;
      list.Insert(step);
      if (i % 97 == 0) {
        const uint64_t a = rng() % (next + 10), b = rng() % (next + 10);
        ASSERT_EQ(Range(list, a, b), Expected(steps, a, b)) << "round " << round << " at " << i;
        const size_t want = Expected(steps, a, b).size();
        const size_t estimate = list.EstimateRange(a, b), late = list.late_size();
        ASSERT_LE(estimate, want + late);
        ASSERT_GE(estimate + late, want);
        if (late == 0) ASSERT_EQ(estimate, want);
        // In slices of at most k, each from the step after the last one
        // listed (as Trial::Steps holds its lock for one slice at a time).
        const size_t k = 1 + rng() % 50;
        std::vector<uint64_t> sliced;
        for (uint64_t from = a;;) {
          const size_t before = sliced.size();
          const size_t got = list.AppendRange(from, b, &sliced, k);
          ASSERT_EQ(got, sliced.size() - before);
          ASSERT_LE(got, k);
          if (got < k || sliced.back() == b) break;
          from = sliced.back() + 1;
        }
        ASSERT_EQ(sliced, Expected(steps, a, b)) << "round " << round << " at " << i << ", k " << k;
      }
    }
    ASSERT_EQ(list.size(), steps.size());
    EXPECT_EQ(Range(list, 0, UINT64_MAX), std::vector<uint64_t>(steps.begin(), steps.end()));
    EXPECT_EQ(Range(list, 5, 4), std::vector<uint64_t>{});
    EXPECT_EQ(Range(list, next + 1, UINT64_MAX), std::vector<uint64_t>{});
    // Appended again after late ones: still in order.
    list.Insert(next + 5);
    steps.insert(next + 5);
    EXPECT_EQ(Range(list, 0, UINT64_MAX), std::vector<uint64_t>(steps.begin(), steps.end()));
  }
}

TEST(StepListTest, StepsArrivingBeforeThoseSavedCostNoMoveOfTheLaterOnes) {
  // A worker writing steps [0, n) after another wrote [n, 2n): each of its
  // steps used to be inserted at the front of the array, moving n later
  // steps: 10^12 bytes moved for this n, minutes. Now a few milliseconds.
  constexpr uint64_t n = 500000;
  StepList list;
  const auto start = Clock::now();
  for (uint64_t s = n; s < 2 * n; ++s) list.Insert(s);
  for (uint64_t s = 0; s < n; ++s) list.Insert(s);
  const double took = SecondsSince(start);
  EXPECT_LT(took, 5.0) << "1,000,000 steps, half of them late";
  std::vector<uint64_t> all = Range(list, 0, UINT64_MAX);
  ASSERT_EQ(all.size(), 2 * n);
  for (uint64_t s = 0; s < 2 * n; ++s) ASSERT_EQ(all[s], s);
  std::printf("1,000,000 steps, the first half late: %.3f s\n", took);
}

TEST(StepListTest, TrialListsStepsTwoWorkersWroteInEitherOrder) {
  // Through Trial::Apply as the committer applies writes: worker_1 saves the
  // high steps first, worker_0 the low ones after.
  // (The old array took 9 s for 200,000 of each and ~36 s for this n.)
  constexpr uint64_t n = 400000;
  Trial trial("t");
  const auto save = [&trial](const char* worker, uint64_t step) {
    TrialUpdate u;
    u.worker = worker;
    u.num_workers = 2;
    u.records.push_back(IndexedRecord{"loss", step, 1, step, {}});
    u.committed_through = static_cast<int64_t>(step);
    trial.Apply(u);
  };
  const auto start = Clock::now();
  for (uint64_t s = n; s < 2 * n; ++s) save("worker_1", s);
  for (uint64_t s = 0; s < n; ++s) save("worker_0", s);
  const double took = SecondsSince(start);
  EXPECT_LT(took, 20.0) << "800,000 updates, half of them late";
  std::printf("800,000 steps through Trial::Apply, the first half late: %.3f s\n", took);
  auto steps = trial.Steps(kModeGlobal, /*show_incomplete=*/true, "", 0, 0);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 2 * n);
  for (uint64_t s = 0; s < 2 * n; ++s) ASSERT_EQ((*steps)[s], s);
  auto some = trial.Steps(kModeGlobal, true, "", n - 2, n + 2);
  ASSERT_TRUE(some.ok());
  EXPECT_THAT(*some, ::testing::ElementsAre(n - 2, n - 1, n, n + 1));
}

}  // namespace
}  // namespace tensorkeep
