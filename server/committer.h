// Committer: the one thread that feeds the store, and the one owner of the
// state that writers share.
//
// Push handlers validate and encode their messages into batches on their own
// threads, then Submit() them here. The committer takes everything queued (a
// group), and for each write, in order:
//  - fails it unwritten when an earlier write of the same stream failed (a
//    later message may commit steps whose data was in the failed one);
//  - checks it against the state it alone changes: a global step has one
//    (mode, mode step) and a mode step one global step, whichever worker
//    wrote it first (CONFLICT naming both), and a trial has at most
//    kMaxWorkers distinct workers and kMaxTensorNamesPerTrial tensor names
//    (RESOURCE_EXHAUSTED); an Open declares the num_workers the trial's
//    other writers declared (CONFLICT naming both);
//  - stages the trial and worker metadata the write changes, including the
//    workers' states (ACTIVE, CLOSED, LOST: server/step_tracker.h): a
//    worker opening a stream is ACTIVE again, a timeout or an operator makes
//    an ACTIVE worker LOST, and once every expected worker is CLOSED or LOST
//    the trial is ended, for good.
// Then every accepted batch and its metadata go to the store as ONE atomic
// write (TensorStore::WriteAll; with --sync one fsync covers the group, and
// no LevelDB log rotation can fall between a write and its sync). Only once
// that write succeeded are the staged metadata kept and each update applied
// to its Trial's in-memory index; then each `done` runs. A failed write
// changes nothing in memory: the writers get the status (their streams end,
// nothing of the group acknowledged) and resend; the next group writes the
// metadata again.
//
// Measured on the 2-core reference machine, handlers writing their own
// batches concurrently fall to ~135-165 MB/s at 4 streams; one writer stays
// near LevelDB's sequential speed (docs/performance.md).
//
// Thread safety: Submit() and queued_bytes() are thread-safe. `done`
// callbacks run on the committer thread and must not block.
#ifndef TENSORKEEP_SERVER_COMMITTER_H_
#define TENSORKEEP_SERVER_COMMITTER_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/memory_budget.h"
#include "server/metrics/commit_metrics.h"
#include "server/trial.h"
#include "server/validation.h"
#include "storage/stored.pb.h"
#include "storage/tensor_store.h"

namespace tensorkeep {

// The writes of one Push stream, as the committer sees them.
struct WriteStream {
  // The first failure of a write of the stream; its later writes fail with it.
  // Touched by the committer thread only.
  absl::Status failed;
};

struct PendingWrite {
  std::shared_ptr<Trial> trial;               // never null
  std::unique_ptr<TensorStore::Batch> batch;  // null: metadata only
  TrialUpdate update;
  // The stream the write belongs to; null for a write of its own.
  std::shared_ptr<WriteStream> stream;
  // The write's share of the memory budget, released once it is done.
  MemoryBudget::Reservation memory;
  // Checked on the committer thread before the write is staged: false drops
  // it as a no-op (done gets OK, nothing is written or applied). Null: none.
  // (A timeout's LOST is dropped when the worker came back meanwhile.)
  std::function<bool()> precondition;
  // Called once the write is durable and applied (OK), or failed.
  std::function<void(const absl::Status&)> done;
  // Set by Submit (the commit latency of /metrics).
  std::chrono::steady_clock::time_point submitted;
};

class Committer {
 public:
  // `store` is not owned and must outlive the committer. `trials` and
  // `workers` are the metadata recovered at start-up.
  // `next_block_id` (the Collector's block id counter; may be null in tests:
  // then a deletion covers every block id) bounds the blocks a deletion
  // covers. `clock` (unix seconds; null: the system clock) stamps trial
  // creations and ends.
  Committer(TensorStore* store, bool sync, std::map<std::string, storage::TrialMeta> trials,
            std::map<std::pair<std::string, std::string>, storage::WorkerMeta> workers,
            size_t max_steps_per_trial = kMaxStepsPerTrial,
            const std::atomic<uint64_t>* next_block_id = nullptr,
            std::function<double()> clock = nullptr);
  // Drains the queue, then stops the thread.
  ~Committer();

  void Submit(PendingWrite write);
  // Bytes of batches queued and not yet taken for writing (flow control).
  size_t queued_bytes() const;
  // Bytes, records and latency of what was committed (/metrics).
  const CommitMetrics& metrics() const { return metrics_; }

 private:
  using WorkerId = std::pair<std::string, std::string>;  // (trial, worker)
  // What the writes of one group change, before they are durable.
  struct Staged {
    std::map<std::string, storage::TrialMeta> trials;
    std::map<WorkerId, storage::WorkerMeta> workers;
    std::map<std::string, uint32_t> worker_counts;
    std::map<std::string, size_t> new_names;  // by trial: names the group adds
    std::map<std::string, size_t> new_steps;  // by trial: global steps the group adds
    // (trial, global step) -> its mode and mode step; (trial, mode, mode step)
    // -> its global step: the steps written by the group's earlier writes.
    std::map<std::pair<std::string, uint64_t>, StepInfo> steps;
    std::map<std::tuple<std::string, int, uint64_t>, uint64_t> mode_steps;
    std::vector<std::string> logs;  // said once the group is durable
    // Trials deleted by the group's writes: name -> (by, when).
    std::map<std::string, std::pair<std::string, double>> deleted;
    // Rule statuses the group stores, by trial (a deletion removes them too).
    std::map<std::string, std::set<std::string>> rules;
    // Collection configurations the group stores: trial -> worker -> them.
    std::map<std::string, CollectionConfigs> collections;
    // Trials the group ends, and when.
    std::vector<std::pair<std::shared_ptr<Trial>, double>> ended;
  };

  void Run();
  // Checks `write` against the committed and staged state; on success stages
  // its steps and metadata and puts the changed metadata into `*meta` (made
  // when needed).
  // *noop: the write changes nothing (a LOST for a worker already LOST,
  // CLOSED or back); it is acknowledged and not applied.
  absl::Status Stage(const PendingWrite& write, Staged* staged,
                     std::unique_ptr<TensorStore::Batch>* meta, bool* noop);
  // The worker's metadata as the group sees it (null: unknown).
  const storage::WorkerMeta* FindWorker(const Staged& staged, const WorkerId& id) const;
  // Every worker of `trial`, as the group sees them, is CLOSED or LOST, and
  // there are at least `expected`.
  bool AllWorkersGone(const std::string& trial, const Staged& staged, uint32_t expected) const;
  // Conflicts of `write`'s steps with those committed or staged; counts in
  // `*fresh` the global steps it adds.
  absl::Status CheckSteps(const PendingWrite& write, const Staged& staged, size_t* fresh) const;
  // Keeps the metadata of a group that is durable.
  void Keep(Staged* staged);
  // Stages the deletion of `write`'s trial (TrialUpdate::delete_trial):
  // one atomic write stores a DeletedTrial entry (storage/stored.proto) and
  // removes the trial's metadata, workers and rule statuses, so that the
  // trial is whole or gone after a crash; its record blocks and values are
  // removed afterwards (server/trial_reclaimer.h).
  void StageDeletion(const PendingWrite& write, Staged* staged,
                     std::unique_ptr<TensorStore::Batch>* meta_batch);

  TensorStore* const store_;
  const bool sync_;
  const size_t max_steps_per_trial_;
  const std::atomic<uint64_t>* const next_block_id_;
  const std::function<double()> clock_;

  mutable absl::Mutex mu_;
  std::deque<PendingWrite> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Owned by the committer thread only: what is durable.
  std::map<std::string, storage::TrialMeta> trial_meta_;
  std::map<WorkerId, storage::WorkerMeta> worker_meta_;
  std::map<std::string, uint32_t> worker_counts_;  // distinct workers by trial
  CommitMetrics metrics_;

  std::thread thread_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_COMMITTER_H_
