// StepTracker: which global steps of a trial are complete.
//
// A worker commits a step when it ends it (explicitly, by moving on to a
// later step, or by closing); it records only the highest step it committed
// ("committed through"), since commits are monotonic. A step is complete when
// every expected worker committed it, when a later step is complete, or when
// the trial ended. The trial expects max(declared num_workers, workers seen):
// so every saved step <= min(committed through of all workers) is complete
// once enough workers have shown up. A worker that closed with
// end-of-training has passed every step.
//
// Thread safety: none; the owning Trial guards it.
#ifndef TENSORKEEP_SERVER_STEP_TRACKER_H_
#define TENSORKEEP_SERVER_STEP_TRACKER_H_

#include <cstdint>
#include <limits>
#include <vector>

namespace tensorkeep {

class StepTracker {
 public:
  static constexpr int64_t kNone = -1;
  static constexpr int64_t kAll = std::numeric_limits<int64_t>::max();

  // Declares that the trial expects at least `n` workers.
  void DeclareWorkers(uint32_t n);
  // Worker `id` (dense, from 0) has committed every step <= through. Lower
  // values than already recorded are ignored.
  void Commit(int id, int64_t through);
  // Worker `id` closed with end-of-training: it passed every step.
  void Finish(int id);
  void End();

  // Ended on request, or every expected worker closed with end-of-training.
  bool ended() const { return ended_ || all_finished_; }
  uint32_t expected_workers() const;
  // Every step <= this is complete (kAll after the end, kNone if none).
  int64_t complete_through() const { return complete_through_; }
  // The highest step any worker committed (kNone if none): steps up to here
  // are "incomplete but visible" (show_incomplete_steps).
  int64_t any_committed_through() const { return any_committed_; }
  bool IsComplete(uint64_t step) const {
    return complete_through_ != kNone && static_cast<int64_t>(step) <= complete_through_;
  }
  int64_t committed(int id) const;

 private:
  void Recompute();

  std::vector<int64_t> committed_;  // by worker id
  std::vector<bool> finished_;      // by worker id
  bool all_finished_ = false;
  uint32_t declared_ = 1;
  bool ended_ = false;
  int64_t complete_through_ = kNone;
  int64_t any_committed_ = kNone;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_STEP_TRACKER_H_
