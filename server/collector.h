// Collector: the core of tensorkeep-server, testable without gRPC.
//
// It owns the store, the in-memory index of every trial (rebuilt from the
// store at start-up) and the committer thread. The gRPC service validates
// nothing itself: it hands protos to the Collector and maps the statuses it
// returns (server/grpc_status.h).
//
// Thread safety: every method is thread-safe.
#ifndef TENSORKEEP_SERVER_COLLECTOR_H_
#define TENSORKEEP_SERVER_COLLECTOR_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/limits.pb.h"
#include "proto/tensorkeep.pb.h"
#include "server/committer.h"
#include "server/executor.h"
#include "server/memory_budget.h"
#include "server/notifier.h"
#include "server/trial.h"
#include "server/trial_reclaimer.h"
#include "server/value_cache.h"
#include "server/worker_registry.h"
#include "storage/tensor_store.h"

namespace tensorkeep {

struct CollectorOptions {
  // fsync LevelDB's log before acknowledging a write (survives power loss).
  // Off: acknowledged writes survive a crash of the process (kill -9).
  bool sync = false;
  // Largest single tensor value accepted, in bytes.
  uint64_t max_value_bytes = 1ull << 30;
  // Memory for large values kept after a reduction or histogram read them
  // (server/value_cache.h); 0 disables the cache.
  size_t value_cache_bytes = 128u << 20;
  // Live Push streams (one per writing worker) accepted at once.
  size_t max_push_streams = 4096;
  // Trials the collector holds, and global steps one trial holds (defaults
  // from proto/limits.proto).
  size_t max_trials = v1::MAX_TRIALS;
  size_t max_steps_per_trial = v1::MAX_STEPS_PER_TRIAL;
  // The one budget of memory clients can make the collector hold
  // (server/memory_budget.h): records waiting for their chunks, batches
  // queued for the committer, and the value cache (which gets at most a
  // quarter of it).
  size_t memory_budget_bytes = size_t{1} << 30;
  // Waiting and watching calls at once, in the collector and in one trial
  // (server/notifier.h; defaults from proto/limits.proto).
  size_t max_watchers = v1::MAX_WATCHERS;
  size_t max_trial_watchers = v1::MAX_TRIAL_WATCHERS;
  // Threads and queue of the executor that reads values and computes
  // reductions off gRPC's threads (server/executor.h).
  size_t executor_threads = 2;
  size_t executor_max_queued = 4096;
  // A worker whose Push stream ended without a close with end-of-training is
  // LOST when no stream of it comes back within this many seconds
  // (server/worker_registry.h); <= 0: never by time.
  double worker_timeout_seconds = 60;
  // Ended trials whose end is older than this many days are deleted by a
  // periodic sweep (--retain-days; fractions of a day are allowed); <= 0:
  // trials are kept until deleted.
  double retain_days = 0;
  // Seconds between two retention sweeps; <= 0: a tenth of retain_days,
  // between 0.1 s and an hour.
  double retention_sweep_seconds = 0;
  // Unix time now (seconds): trials' creation and end times, and retention;
  // null: the system clock. Tests pass their own.
  std::function<double()> clock;
  // Tests: TrialReclaimerOptions::fault_point (server/trial_reclaimer.h).
  std::function<absl::Status(std::string_view stage)> fault_point;
  // Scaling out (docs/scaling-out.md): the collectors of the cluster
  // (HOST:PORT as clients reach them) and this one's address among them.
  // With a cluster, a trial this collector does not hold is created only if
  // it owns it (base/rendezvous.h); others get WRONG_COLLECTOR naming the
  // owner. Trials it holds stay its own whoever owns them now. Empty: a
  // single collector, which takes every trial.
  std::vector<std::string> cluster;
  std::string advertise;
};

class Collector {
 public:
  // Rebuilds the index from `store` (not owned; must outlive the collector).
  static absl::StatusOr<std::unique_ptr<Collector>> Create(const CollectorOptions& options,
                                                           TensorStore* store);
  // Waits for queued writes to finish.
  ~Collector();

  const CollectorOptions& options() const { return options_; }
  MemoryBudget* memory() { return &memory_; }
  TensorStore* store() const { return store_; }
  // Runs the trials' listeners off the commit loop and counts watchers.
  Notifier* notifier() const { return notifier_.get(); }
  // Runs reads and reductions for the gRPC service, off its threads.
  Executor* executor() const { return executor_.get(); }

  // The trial, or TrialNotFound.
  absl::StatusOr<std::shared_ptr<Trial>> GetTrial(const std::string& name) const;
  // The same for readers: an unpublished trial (a copy `tensorkeep
  // rebalance` is writing) is TrialNotFound unless `unpublished`.
  absl::StatusOr<std::shared_ptr<Trial>> GetPublishedTrial(const std::string& name,
                                                           bool unpublished = false) const;
  // The trial, created in memory when new (a writer's Open). It becomes
  // durable with the first write that references it. ResourceExhausted when
  // new and the collector already holds max_trials; WrongCollector when new
  // and another collector of the cluster owns it (options().cluster).
  // `unpublished` (Open.unpublished): a new trial is created unpublished; an
  // existing one must be unpublished as well, and a writer without it cannot
  // open an unpublished one (FailedPrecondition either way).
  absl::StatusOr<std::shared_ptr<Trial>> GetOrCreateTrial(const std::string& name,
                                                          bool unpublished = false);
  std::vector<std::shared_ptr<Trial>> Trials() const;

  // Claims (trial, worker) for one Push stream until ReleaseWriter, and
  // returns the claim's id. While another live stream holds it, fails with
  // Conflict for a writer's first stream (two processes write as one worker)
  // and Unavailable for a resuming one (Open.resume: it retries until the
  // collector has seen its old stream end); its message says what to do.
  // ResourceExhausted when max_push_streams streams write already.
  absl::StatusOr<uint64_t> ClaimWriter(const std::string& trial, const std::string& worker,
                                       bool resume);
  // Releases the claim `id` (nothing if it was released already, so a late
  // release never drops a newer stream's claim).
  // It starts the worker's --worker-timeout.
  void ReleaseWriter(const std::string& trial, const std::string& worker, uint64_t id);
  // Each worker's status (state, last steps, whether it has a live stream).
  std::vector<v1::WorkerStatus> WorkerStatuses(const Trial& trial) const;
  // The trial's summary with each worker's `connected` set (what ListTrials,
  // GetTrial and the HTTP API show).
  v1::TrialSummary SummaryOf(const Trial& trial) const;
  // Sets `connected` in statuses of `trial`'s workers.
  void MarkConnected(const std::string& trial,
                     google::protobuf::RepeatedPtrField<v1::WorkerStatus>* statuses) const;

  // Queues a durable write (see Committer).
  void Submit(PendingWrite write) { committer_->Submit(std::move(write)); }
  size_t queued_bytes() const { return committer_->queued_bytes(); }
  // What the committer made durable (/metrics).
  const CommitMetrics& commit_metrics() const { return committer_->metrics(); }

  // ---- Operations that touch the store (the rest are Trial's). ----

  // A saved record: its metadata (TensorRecord without data) and its raw
  // bytes once loaded.
  struct Value {
    Trial::Located where;
    v1::TensorRecord meta;
    std::string data;
    bool data_loaded = false;  // `data` holds the value (always for small values)
    uint64_t block_id = 0;     // the block holding the metadata (and names a large value)
  };
  // The record of `tensor` at (step, worker) as stored, newest write first;
  // std::nullopt when the index knows no block holding it.
  absl::StatusOr<std::optional<Value>> FindRecord(const Trial& trial, uint64_t step,
                                                  const std::string& worker,
                                                  const std::string& tensor) const;
  // The record at a located place (its bytes loaded only when small).
  absl::StatusOr<Value> ReadRecord(const Trial& trial, const std::string& tensor,
                                   const Trial::Located& where) const;
  // Loads the bytes of a record read by ReadRecord; TensorUnavailableForStep
  // when only reductions were saved.
  absl::Status LoadValue(const Trial& trial, Value* value) const;
  // Calls `fn` on the bytes of a record read by ReadRecord. A large value is
  // kept in the value cache for the next call (its key names its block, so
  // the bytes under it never change).
  absl::Status WithValue(const Trial& trial, const Value& value,
                         const std::function<absl::Status(absl::Span<const char>)>& fn) const;
  // The bytes of a record read by ReadRecord, read piece by piece (from the
  // value cache when it holds them); TensorUnavailableForStep when only
  // reductions were saved, DataLoss when the stored size is not the record's.
  absl::StatusOr<std::unique_ptr<TensorStore::BulkReader>> OpenValue(const Trial& trial,
                                                                     const Value& value) const;
  // ReadRecord + LoadValue.
  absl::StatusOr<Value> ReadValue(const Trial& trial, const std::string& tensor,
                                  const Trial::Located& where) const;
  // A new record block id (unique in the database, increasing).
  uint64_t NewBlockId() { return next_block_id_.fetch_add(1, std::memory_order_relaxed); }
  absl::StatusOr<v1::ReductionsResponse> Reductions(const v1::ReductionsRequest& request) const;
  absl::StatusOr<v1::HistogramResponse> Histogram(const v1::HistogramRequest& request) const;

  // Deletes the trial (admin; `who` deleted it: a token's NAME, or
  // "retention"). Calls `done` once the deletion is durable (on the committer
  // thread) with what the trial held, or with the error (TrialNotFound;
  // possibly at once, on this thread); with `wait_reclaimed`, only once its
  // space is reclaimed too (on the reclaimer's thread). From then on the
  // trial is gone: readers get TrialNotFound, its waits and watches end with
  // it, its writers get Trial::DeletedError, it no longer counts against
  // max_trials, and GetOrCreateTrial makes a new one of that name. Its data is
  // removed in the background (server/trial_reclaimer.h). Never blocks.
  void DeleteTrial(const std::string& trial, const std::string& who, bool wait_reclaimed,
                   std::function<void(absl::StatusOr<v1::DeleteTrialResponse>)> done);
  // Publishes an unpublished trial (PublishTrial): calls `done` with its
  // summary once that is durable, or with the error, as EndTrial does. A
  // published trial is answered at once.
  void PublishTrial(const std::string& trial,
                    std::function<void(absl::StatusOr<v1::TrialSummary>)> done);
  // Deletes the ended trials older than retain_days (the reclaimer's sweep).
  void ExpireTrials();
  // Deleted trials whose space is not yet reclaimed (tests).
  size_t reclaims_pending() const;

  // Ends the trial (like every writer closing with end-of-training). Calls
  // `done` with whether it was running once durable (on the committer
  // thread), or with the error (possibly at once, on this thread). Never
  // blocks; `done` must not block either.
  void EndTrial(const std::string& trial, std::function<void(absl::StatusOr<bool>)> done);
  // Declares `worker` LOST now (an operator's `tensorkeep worker-lost`);
  // calls `done` with its status once durable, or with the error
  // (InvalidWorker when it never wrote to the trial, FailedPrecondition when
  // it is CLOSED), as EndTrial does.
  void DeclareWorkerLost(const std::string& trial, const std::string& worker,
                         std::function<void(absl::StatusOr<v1::WorkerStatus>)> done);
  // Stores a rule status (and the stop request its action implies); calls
  // `done` with the stored status once durable, or with the error, as
  // EndTrial does.
  void ReportRuleStatus(v1::RuleStatus status,
                        std::function<void(absl::StatusOr<v1::RuleStatus>)> done);
  // Stores the collection configuration of `request.worker()` (replacing
  // what it sent before), creating the trial as a writer's Open does; calls
  // `done` once durable, or with the error (BAD_REQUEST: malformed, see
  // ValidatePutCollections; FAILED_PRECONDITION: the trial ended;
  // RESOURCE_EXHAUSTED: beyond the trial's limits), as EndTrial does.
  // `unpublished`: the call addresses an unpublished copy (tensorkeep
  // rebalance writes the original's configurations into it).
  void PutCollections(const v1::PutCollectionsRequest& request, bool unpublished,
                      std::function<void(absl::StatusOr<v1::PutCollectionsResponse>)> done);

 private:
  Collector(const CollectorOptions& options, TensorStore* store);
  // Refuses a database of another storage format; marks a new one.
  absl::Status CheckFormat();
  absl::Status Recover();
  // The size-checked bytes of a record's large value under `key` (its ValueKey).
  absl::StatusOr<std::string> ReadLargeValue(const Value& value, const std::string& key) const;
  // The registry's timeout of (trial, worker) passed: queue its LOST.
  void OnWorkerTimeout(const std::string& trial, const std::string& worker, uint64_t generation);

  // Unix seconds now (options_.clock, or the system clock).
  double Now() const;

  const CollectorOptions options_;
  TensorStore* const store_;
  // When this collector started: the end time of trials that ended before
  // end times were recorded (retention counts from it).
  double started_unix_ = 0;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Trial>> trials_ ABSL_GUARDED_BY(mu_);

  MemoryBudget memory_;
  MemoryBudget::Reservation cache_memory_;  // the value cache's share
  mutable ValueCache value_cache_;
  std::atomic<uint64_t> next_block_id_{1};
  // Shared with every Trial; stopped after the committer (which signals it).
  std::shared_ptr<Notifier> notifier_;
  // Live streams and timeouts; stopped first, destroyed after the committer
  // (whose queued LOST writes ask it whether the worker came back).
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<Committer> committer_;
  std::unique_ptr<Executor> executor_;  // stopped first: its tasks read the store
  // Removes deleted trials' data and runs the retention sweep; stopped
  // before the committer (the sweep submits deletions). Null once stopped:
  // a deletion durable after that is finished at the next start.
  mutable absl::Mutex reclaimer_mu_;
  std::unique_ptr<TrialReclaimer> reclaimer_ ABSL_GUARDED_BY(reclaimer_mu_);
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_COLLECTOR_H_
