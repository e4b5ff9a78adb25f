// TrialReclaimer: the background thread that gives back the space of deleted
// trials, and runs the retention sweep.
//
// Deleting a trial (Collector::DeleteTrial) is one atomic write on the
// committer: a DeletedTrial entry (storage/stored.proto) goes in as the
// trial's metadata, workers and rule statuses go out. From then on the trial
// is gone for readers and writers, also after a restart. What is left —
// its record blocks (ids below the entry's block bound) and the index entries
// of its large values — is removed here, in batches of a few thousand keys
// (each its own atomic write, so writers wait for none of them long), then
// the LevelDB range is compacted, then the DeletedTrial entry is removed (the
// last step), then the value log rewrites or drops the files the deletion
// left mostly garbage (TensorStore::ReclaimValueSpace). A crash anywhere in
// between leaves the entry: recovery ignores what remains of the trial and
// this thread finishes the job at start-up.
//
// Thread safety: thread-safe. `done` callbacks and the sweep run on the
// reclaimer's thread.
#ifndef TENSORKEEP_SERVER_TRIAL_RECLAIMER_H_
#define TENSORKEEP_SERVER_TRIAL_RECLAIMER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/tensor_store.h"

namespace tensorkeep {

struct TrialReclaimerOptions {
  // Seconds between two calls of the sweep (the retention check); <= 0: no
  // sweep.
  double sweep_seconds = 0;
  // Tests: called at each stage of a trial's removal ("delete.batch": before
  // each batch of deletions; "delete.compacted": everything deleted and
  // compacted, the DeletedTrial entry not yet removed). A non-OK status stops
  // the job there, as a crash would (the job is retried at the next start).
  std::function<absl::Status(std::string_view stage)> fault_point;
};

class TrialReclaimer {
 public:
  // What removing one deleted trial's data did.
  struct Result {
    uint64_t keys = 0;         // index entries removed
    uint64_t index_bytes = 0;  // their keys and entries (blocks hold small values)
    uint64_t value_bytes = 0;  // bytes of its large values, now value-log garbage
    TensorStore::ReclaimStats values;  // the value-log reclaim that followed
  };
  using Done = std::function<void(const absl::StatusOr<Result>&)>;

  // `store` is not owned and must outlive the reclaimer. Starts the thread,
  // which first finishes the deletions a previous run left (every
  // DeletedTrial entry) and reclaims value-log space left by a crash.
  TrialReclaimer(TensorStore* store, TrialReclaimerOptions options, std::function<void()> sweep);
  // Stops after the job in progress (a job left is finished at the next start).
  ~TrialReclaimer();

  // Queues the removal of the data of `trial`, deleted (its DeletedTrial
  // entry written); `done` (may be null) gets the result.
  void Reclaim(std::string trial, Done done);
  // Jobs queued or running (tests, metrics).
  size_t pending() const;

 private:
  struct Job {
    std::string trial;
    Done done;
  };
  void Run();
  absl::StatusOr<Result> RemoveTrial(const std::string& trial);
  // Removes the blocks of `trial` with ids below `bound` and their values.
  absl::Status RemoveBlocks(const std::string& trial, uint64_t bound, Result* result,
                            uint64_t* min_id, uint64_t* max_id);
  absl::Status Fault(std::string_view stage) const;

  TensorStore* const store_;
  const TrialReclaimerOptions options_;
  const std::function<void()> sweep_;

  mutable absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_TRIAL_RECLAIMER_H_
