// StepTracker: which global steps of a trial are complete.
//
// A worker commits a step when it ends it (explicitly, by moving on to a
// later step, or by closing); it records only the highest step it committed
// ("committed through"), since commits are monotonic. Each worker is ACTIVE,
// CLOSED (closed with end-of-training: it passed every step) or LOST (gone;
// server/worker_registry.h). The trial expects max(declared num_workers,
// workers seen). A step is complete when every expected worker has shown up
// and every ACTIVE one committed it (LOST workers are not waited for), when a
// later step is complete, or when the trial ended. Completeness never goes
// back: a LOST worker that becomes ACTIVE again, a new worker, or a worker
// restarting (a new attempt, which commits again from nothing) leaves the
// steps complete that were complete.
//
// The trial ends on request, or when every expected worker has shown up and
// none is ACTIVE (all CLOSED or LOST). The end is final.
//
// With no worker LOST this is smdebug's rule: a step is complete when every
// worker committed it.
//
// Thread safety: none; the owning Trial guards it.
#ifndef TENSORKEEP_SERVER_STEP_TRACKER_H_
#define TENSORKEEP_SERVER_STEP_TRACKER_H_

#include <cstdint>
#include <limits>
#include <set>
#include <vector>

namespace tensorkeep {

enum class WorkerState { kActive = 1, kClosed = 2, kLost = 3 };

class StepTracker {
 public:
  static constexpr int64_t kNone = -1;
  static constexpr int64_t kAll = std::numeric_limits<int64_t>::max();

  // Declares that the trial expects at least `n` workers.
  void DeclareWorkers(uint32_t n);
  // Worker `id` (dense, from 0) has committed every step <= through. Lower
  // values than already recorded are ignored. A new id is ACTIVE.
  void Commit(int id, int64_t through);
  // Worker `id` closed with end-of-training: it passed every step.
  void Finish(int id);
  // Worker `id` is LOST (a CLOSED worker stays CLOSED).
  void Lose(int id);
  // Worker `id`, if LOST, is ACTIVE again.
  void Reactivate(int id);
  // Worker `id` starts a new attempt (its job restarted): ACTIVE, having
  // committed nothing. The steps complete so far stay complete.
  void Restart(int id);
  void End();
  // Every step <= through is complete (and stays so), whatever the workers.
  void RaiseFloor(int64_t through);

  // Ended on request, or every expected worker CLOSED or LOST.
  bool ended() const { return ended_; }
  uint32_t expected_workers() const;
  // Every step <= this is complete (kAll after the end, kNone if none).
  int64_t complete_through() const { return complete_through_; }
  // The highest step any worker committed (kNone if none): steps up to here
  // are "incomplete but visible" (show_incomplete_steps).
  int64_t any_committed_through() const { return any_committed_; }
  bool IsComplete(uint64_t step) const {
    return complete_through_ != kNone && static_cast<int64_t>(step) <= complete_through_;
  }
  // kAll for a CLOSED worker.
  int64_t committed(int id) const;
  WorkerState state(int id) const;

 private:
  void Grow(int id);
  // Changes worker `id` with `change` (which sets committed_[id] and
  // states_[id]), keeping active_committed_ and any_committed_ in step.
  template <typename F>
  void Change(int id, F change);
  void Recompute();

  std::vector<int64_t> committed_;   // by worker id
  std::vector<WorkerState> states_;  // by worker id
  // committed_ of the ACTIVE workers: their least is what is complete, in
  // O(log n) a change rather than a walk over every worker (a trial may
  // have tens of thousands).
  std::multiset<int64_t> active_committed_;
  uint32_t declared_ = 1;
  bool ended_ = false;
  int64_t complete_through_ = kNone;
  int64_t any_committed_ = kNone;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_STEP_TRACKER_H_
