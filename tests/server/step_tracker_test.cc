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
  EXPECT_EQ(t.complete_through(), 5);
  t.Commit(1, 2);
  EXPECT_EQ(t.expected_workers(), 2u);
  // Steps once complete stay complete; later ones wait for the new worker.
  EXPECT_EQ(t.complete_through(), 5);
  t.Commit(0, 9);
  EXPECT_EQ(t.complete_through(), 5);
  t.Commit(1, 7);
  EXPECT_EQ(t.complete_through(), 7);
}

TEST(StepTrackerTest, LostWorkersAreNotAwaited) {
  StepTracker t;
  t.DeclareWorkers(3);
  t.Commit(0, 9);
  t.Commit(1, 6);
  t.Commit(2, 3);
  EXPECT_EQ(t.complete_through(), 3);
  t.Lose(2);
  EXPECT_EQ(t.state(2), WorkerState::kLost);
  EXPECT_EQ(t.complete_through(), 6);
  EXPECT_FALSE(t.ended());
}

TEST(StepTrackerTest, ALostWorkerBackIsAwaitedAgainWithoutUndoingCompleteSteps) {
  StepTracker t;
  t.DeclareWorkers(2);
  t.Commit(0, 9);
  t.Commit(1, 3);
  t.Lose(1);
  EXPECT_EQ(t.complete_through(), 9);
  t.Reactivate(1);
  EXPECT_EQ(t.state(1), WorkerState::kActive);
  EXPECT_EQ(t.complete_through(), 9);  // never back
  t.Commit(0, 12);
  EXPECT_EQ(t.complete_through(), 9);  // step 10 waits for worker 1 again
  t.Commit(1, 11);
  EXPECT_EQ(t.complete_through(), 11);
}

TEST(StepTrackerTest, LostWorkersDoNotCountForTheDeclaredNumberNotYetSeen) {
  StepTracker t;
  t.DeclareWorkers(3);
  t.Commit(0, 4);
  t.Commit(1, 4);
  t.Lose(1);
  // The third worker has not shown up: nothing is complete, nothing ended.
  EXPECT_EQ(t.complete_through(), StepTracker::kNone);
  EXPECT_FALSE(t.ended());
  t.Commit(2, 2);
  EXPECT_EQ(t.complete_through(), 2);
}

TEST(StepTrackerTest, EveryWorkerClosedOrLostEndsTheTrialForGood) {
  StepTracker t;
  t.DeclareWorkers(2);
  t.Commit(0, 4);
  t.Finish(1);
  EXPECT_FALSE(t.ended());
  t.Lose(0);
  EXPECT_TRUE(t.ended());
  EXPECT_TRUE(t.IsComplete(1000000));
  t.Reactivate(0);  // it comes back: the end stays
  EXPECT_TRUE(t.ended());
  t.Lose(1);  // a CLOSED worker is not lost
  EXPECT_EQ(t.state(1), WorkerState::kClosed);
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
