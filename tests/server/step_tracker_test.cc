#include "server/step_tracker.h"

#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

TEST(StepTrackerTest, NothingIsCompleteBeforeAnyCommit) {
  StepTracker t;
  EXPECT_EQ(t.complete_through(), StepTracker::kNone);
  EXPECT_FALSE(t.IsComplete(0));
}

TEST(StepTrackerTest, SingleWorkerCompletesWhatItCommits) {
  StepTracker t;
  t.Commit(0, 4);
  EXPECT_TRUE(t.IsComplete(4));
  EXPECT_FALSE(t.IsComplete(5));
}

TEST(StepTrackerTest, StepNeedsEveryExpectedWorker) {
  StepTracker t;
  t.DeclareWorkers(3);
  t.Commit(0, 10);
  t.Commit(1, 10);
  EXPECT_FALSE(t.IsComplete(0)) << "third worker not seen yet";
  EXPECT_EQ(t.any_committed_through(), 10);
  t.Commit(2, 6);
  EXPECT_EQ(t.complete_through(), 6);
  EXPECT_TRUE(t.IsComplete(6));
  EXPECT_FALSE(t.IsComplete(7));
}

TEST(StepTrackerTest, CommitsNeverGoBackwards) {
  StepTracker t;
  t.Commit(0, 8);
  t.Commit(0, 3);
  EXPECT_EQ(t.committed(0), 8);
}

TEST(StepTrackerTest, WorkersBeyondTheDeclaredCountAreAlsoAwaited) {
  StepTracker t;
  t.DeclareWorkers(1);
  t.Commit(0, 5);
  t.Commit(1, 2);
  EXPECT_EQ(t.expected_workers(), 2u);
  EXPECT_EQ(t.complete_through(), 2);
}

TEST(StepTrackerTest, FinishedWorkersPassEveryStepAndAllFinishedEndsTheTrial) {
  StepTracker t;
  t.DeclareWorkers(2);
  t.Commit(0, 3);
  t.Finish(1);
  EXPECT_EQ(t.complete_through(), 3);
  EXPECT_FALSE(t.ended());
  t.Finish(0);
  EXPECT_TRUE(t.ended());
  EXPECT_TRUE(t.IsComplete(1000000));
}

TEST(StepTrackerTest, EndCompletesEverything) {
  StepTracker t;
  t.DeclareWorkers(4);
  t.Commit(0, 1);
  t.End();
  EXPECT_TRUE(t.ended());
  EXPECT_TRUE(t.IsComplete(99));
}

}  // namespace
}  // namespace tensorkeep
