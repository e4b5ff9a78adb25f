// Trial: the in-memory index of one trial — its steps, modes, workers,
// tensor names and the steps each tensor was saved at, collections, step
// completeness, rule statuses and stop request — and the listeners waiting
// for it to change.
//
// The index holds only what is durable: the Collector applies a TrialUpdate
// after its batch is in the store, and rebuilds every Trial from the store's
// metadata at start-up. Values and tensor metadata stay in the store; listing
// steps, names, modes and workers never reads them.
//
// Queries follow smdebug's Trial and Tensor semantics (docs/semantics.md) and
// fail with the reasons of base/errors.h.
//
// Thread safety: all methods are thread-safe. Listeners are called without
// the trial's lock held, on the Notifier's thread (server/notifier.h): the
// thread that applies an update only bumps version() and signals it. (A
// Trial made without a Notifier, as some tests make them, calls its
// listeners on the applying thread.)
#ifndef TENSORKEEP_SERVER_TRIAL_H_
#define TENSORKEEP_SERVER_TRIAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/tensorkeep.pb.h"
#include "server/collection_config.h"
#include "server/notifier.h"
#include "server/step_list.h"
#include "server/step_tracker.h"
#include "server/worker_set.h"

namespace tensorkeep {

// smdebug's mode numbers. GLOBAL (and an unspecified 0) address global steps.
inline constexpr int kModeGlobal = 4;
inline bool IsGlobalMode(int mode) { return mode == 0 || mode == kModeGlobal; }
std::string ModeName(int mode);
// "step 5" for GLOBAL, "TRAIN step 5" for a mode step: how messages name a step.
std::string StepText(uint64_t step, int mode);

struct StepInfo {
  int mode = kModeGlobal;
  uint64_t mode_step = 0;
};

// The index part of one saved tensor record.
struct IndexedRecord {
  std::string name;
  uint64_t step = 0;
  int mode = kModeGlobal;
  uint64_t mode_step = 0;
  std::vector<std::string> collections;
};

// A stored record block (storage/record_block.h) of one step and worker:
// where to look for a record without reading the others.
struct BlockRef {
  uint64_t step = 0;
  uint64_t id = 0;
  std::string first_name, last_name;  // the block's name range
};

// A change of a worker's state (server/step_tracker.h) an update carries.
enum class WorkerChange {
  kNone,
  kOpened,        // the worker opened a Push stream: a LOST worker is ACTIVE again
  kTimedOut,      // no stream for --worker-timeout: an ACTIVE worker is LOST
  kDeclaredLost,  // an operator declared it lost (DeclareWorkerLost): LOST
};

// What one durable batch changed in a trial.
struct TrialUpdate {
  std::string worker;        // empty for trial-level updates
  uint32_t num_workers = 0;  // declared by the writer; 0: no declaration
  std::vector<IndexedRecord> records;
  std::vector<BlockRef> blocks;                    // the blocks holding `records`
  int64_t committed_through = StepTracker::kNone;  // kNone: unchanged
  bool finished = false;                           // the worker closed with end-of-training
  WorkerChange change = WorkerChange::kNone;
  // The writer's attempt (v1.Open.attempt), on every write of a Push stream.
  // With kOpened, an attempt higher than the worker's starts a new attempt of
  // a known worker (a restart of its job, at restart_unix): its committed
  // step starts again from nothing, the steps complete so far stay complete,
  // and the restart is recorded.
  uint32_t attempt = 0;
  double restart_unix = 0;
  // Recovery: the worker's attempt and restarts as stored (nothing restarts).
  bool recovered_attempt = false;
  std::vector<v1::WorkerRestart> restarts;
  // Steps <= this are complete (recovery: TrialMeta.complete_below - 1).
  int64_t complete_floor = StepTracker::kNone;
  std::string lost_reason;  // kLost: why
  double lost_unix = 0;     // kLost: when
  bool end_trial = false;
  std::optional<v1::RuleStatus> rule_status;
  // The collection configuration `collections_worker` sent (PutCollections):
  // it replaces what that worker sent before. Null: none.
  WorkerCollectionsPtr collections;
  std::string collections_worker;
  // The trial is deleted (Collector::DeleteTrial): by whom (a token's NAME,
  // or "retention") and when. Nothing else of the update applies.
  bool delete_trial = false;
  // An unpublished trial (Collector::PublishTrial) is published.
  bool publish = false;
  std::string deleted_by;
  double deleted_unix = 0;
};

// The error a writer of a deleted trial gets (FAILED_PRECONDITION).
absl::Status TrialDeletedError(const std::string& trial, const std::string& by, double unix);
// "2026-11-24T08:30:00Z": how messages give a time.
std::string UnixTimeText(double unix);

enum class StepState { kUnavailable = 1, kAvailable = 2, kNotYetAvailable = 3 };

class Trial;

// A registered listener, unregistered (and its watcher slot freed) when the
// last copy is destroyed, whether or not the trial changes again. The
// callback may still be running in another thread at that moment: it must
// guard whatever it touches (see ReactorGuard in server/stream_reactors.h).
class TrialSubscription {
 public:
  TrialSubscription(std::shared_ptr<Trial> trial, uint64_t id, bool watcher)
      : trial_(std::move(trial)), id_(id), watcher_(watcher) {}
  ~TrialSubscription();
  TrialSubscription(const TrialSubscription&) = delete;
  TrialSubscription& operator=(const TrialSubscription&) = delete;

 private:
  const std::shared_ptr<Trial> trial_;
  const uint64_t id_;
  const bool watcher_;
};

// Always held by a std::shared_ptr (subscriptions and the Notifier's queue
// keep it alive).
class Trial : public std::enable_shared_from_this<Trial> {
 public:
  // `notifier` runs the listeners and counts watchers against its limits;
  // null: listeners run on the applying thread, no limits.
  explicit Trial(std::string name, std::shared_ptr<Notifier> notifier = nullptr);

  const std::string& name() const { return name_; }

  // ---- Write side (the Collector's committer and recovery) ----

  // Applies a durable update, bumps version() and signals the Notifier. O(1)
  // in the number of listeners: none of them runs here.
  void Apply(const TrialUpdate& update);
  // Updates applied so far by Apply (not by ApplyQuietly).
  uint64_t version() const { return version_.load(); }
  // Updates that wrote again a step a restarted worker's earlier attempt had
  // committed (server/worker_attempts.h): what was computed from the values
  // of such steps may be stale when this changed.
  uint64_t rewrites() const { return rewrites_.load(); }
  // The same without notifying (recovery at start-up).
  void ApplyQuietly(const TrialUpdate& update);
  // State the writer validation needs.
  int64_t CommittedThrough(const std::string& worker) const;
  // The worker's current attempt (v1.Open.attempt); nullopt if it never wrote.
  std::optional<uint32_t> AttemptOf(const std::string& worker) const;
  std::optional<StepInfo> GetStep(uint64_t step) const;
  // The number of tensor names the trial holds, and how many distinct names
  // of `records` it does not hold yet.
  size_t CountNewNames(const std::vector<IndexedRecord>& records, size_t* held) const;
  // The global step saved as (mode, mode_step), if any (mode not GLOBAL).
  std::optional<uint64_t> FindGlobalStep(int mode, uint64_t mode_step) const;
  bool ended() const;
  // An unpublished copy (Open.unpublished): hidden from readers
  // (Collector::GetPublishedTrial) until published.
  bool unpublished() const { return unpublished_.load(); }
  void SetUnpublished(bool unpublished) { unpublished_.store(unpublished); }
  // When it ended (unix seconds): 0 while running, or when unknown (it ended
  // before the collector recorded end times).
  double ended_unix() const;
  // Records when it ended (the committer, once the end is durable).
  void NoteEnded(double unix);
  // Deleted (Collector::DeleteTrial): the object stays valid for those who
  // hold it, but the trial is gone. `by` and `at` say who deleted it, when.
  bool deleted(std::string* by = nullptr, double* at = nullptr) const;
  // TrialNotFound for a reader of the deleted trial; the writers' error.
  absl::Status NotFoundError() const;
  absl::Status DeletedError() const;
  // Every step <= this is complete (kNone: none; kAll once ended).
  int64_t CompleteThrough() const;
  bool stop_requested(std::string* reason) const;
  uint32_t num_workers() const;
  // Distinct global steps saved.
  size_t StepCount() const;

  // ---- Queries ----

  // Walks over a trial's steps hold its lock for at most this many steps at a
  // time: the committer, which applies every trial's writes on one thread,
  // then waits ~1 ms for a reader however large the trial (a tensor_names of
  // one mode on 1,000,000 steps held it 129 ms, LocateAll 146 ms).
  static constexpr size_t kStepsPerLockHold = 8192;

  v1::TrialSummary Summary() const;
  // smdebug's trial.steps(mode, show_incomplete_steps) / tensor.steps(...) when
  // `tensor` is non-empty: global steps for GLOBAL, otherwise mode steps.
  // [range_begin, range_end) restricts global steps (range_end 0: none).
  absl::StatusOr<std::vector<uint64_t>> Steps(int mode, bool show_incomplete,
                                              const std::string& tensor, uint64_t range_begin,
                                              uint64_t range_end) const;
  // smdebug's trial.tensor_names(step, mode, regex, collection).
  absl::StatusOr<std::vector<std::string>> TensorNames(std::optional<uint64_t> step, int mode,
                                                       const std::vector<std::string>& regex,
                                                       const std::string& collection) const;
  std::vector<std::string> Workers() const;
  // Each worker's state, last saved and committed step, sorted by name
  // (`connected` is left false: the collector knows the live streams).
  std::vector<v1::WorkerStatus> WorkerStatuses() const;
  // The state of `worker`, or nullopt if it never wrote to the trial.
  std::optional<WorkerState> StateOf(const std::string& worker) const;
  // Sets the event's `workers` (those that saved tensors at `step`) and
  // `lost_workers` (the trial's LOST workers now).
  void DescribeStep(uint64_t step, v1::StepEvent* event) const;
  std::vector<int> Modes() const;
  std::map<std::string, std::vector<std::string>> Collections() const;
  // Every collection: those tensors were saved under and those configured
  // (PutCollections), by name, with the merged configuration
  // (MergeCollections) and as tensor names those saved under it and those
  // configured.
  std::vector<v1::CollectionInfo> CollectionInfos() const;
  // What each worker configured (PutCollections), by worker.
  CollectionConfigs CollectionConfigsByWorker() const;
  // mode(global_step) and mode_step(global_step).
  absl::StatusOr<StepInfo> ModeOf(uint64_t global_step) const;
  // global_step(mode, mode_step).
  absl::StatusOr<uint64_t> GlobalStep(int mode, uint64_t mode_step) const;
  StepState HasPassedStep(uint64_t step, int mode) const;

  // A saved record addressed as smdebug's tensor.value(step, mode, worker):
  // the global step and the worker (the lexically first when `worker` is
  // empty). Errors: TensorUnavailable, InvalidWorker, TensorUnavailableForStep,
  // StepUnavailable, StepNotYetAvailable, as smdebug raises them.
  struct Located {
    uint64_t global_step;
    StepInfo info;
    std::string worker;
  };
  absl::StatusOr<Located> Locate(const std::string& tensor, uint64_t step, int mode,
                                 const std::string& worker) const;
  // Every saved record of `tensor` in `mode` (complete steps only, as
  // tensor.values()), within the global range, for `worker` (or the first).
  absl::StatusOr<std::vector<Located>> LocateAll(const std::string& tensor, int mode,
                                                 const std::string& worker, uint64_t range_begin,
                                                 uint64_t range_end) const;
  absl::StatusOr<std::vector<std::string>> TensorWorkers(const std::string& tensor, uint64_t step,
                                                         int mode) const;
  absl::StatusOr<std::vector<uint64_t>> PrevSteps(const std::string& tensor, uint64_t step,
                                                  uint32_t n, int mode) const;

  // The ids of the blocks of (step, worker) whose name range holds `tensor`,
  // newest first: the record is in the first of them that has it.
  std::vector<uint64_t> BlocksFor(uint64_t step, const std::string& worker,
                                  const std::string& tensor) const;

  // Complete steps with global step >= from, in order, at most `limit`.
  std::vector<std::pair<uint64_t, StepInfo>> CompleteStepsFrom(uint64_t from, size_t limit) const;
  // The highest saved global step (-1 if none).
  int64_t LastStep() const;
  // The highest saved step of `mode`: a global step for GLOBAL, otherwise a
  // mode step of that mode; nullopt if none was saved.
  std::optional<uint64_t> LastStep(int mode) const;

  std::vector<v1::RuleStatus> RuleStatuses() const;
  // Rule statuses stored after change number `after` (0: all), in the order
  // stored, at most `limit`, each with its change number: a watch asks for
  // what changed since it last looked, not for every rule again.
  std::vector<std::pair<uint64_t, v1::RuleStatus>> RuleStatusesAfter(uint64_t after,
                                                                     size_t limit) const;

  // Registers `fn` to run (on the Notifier's thread) after applied updates,
  // until the returned subscription is destroyed. Several updates may wake
  // `fn` once: it re-reads the state it needs. Not counted as a watcher
  // (Push streams, which have their own limit, listen this way).
  std::shared_ptr<TrialSubscription> Subscribe(std::function<void()> fn);
  // The same for a waiter or watcher (WaitForSteps, WatchSteps,
  // WatchRuleStatuses): counted against the Notifier's max_trial_watchers
  // and max_watchers; ResourceExhausted, saying which limit, beyond them.
  absl::StatusOr<std::shared_ptr<TrialSubscription>> Watch(std::function<void()> fn);
  // Registered listeners, and of them watchers (tests, metrics).
  size_t listeners() const;
  size_t watchers() const;

 private:
  struct TensorEntry {
    absl::btree_map<uint64_t, WorkerSet> steps;  // global step -> workers
    // Bit m: saved at a step of mode m (a step's mode never changes, and no
    // step is removed): tensor_names(mode=...) without walking the steps.
    uint8_t modes = 0;
    bool HasMode(int mode) const { return mode >= 0 && mode < 8 && (modes >> mode & 1) != 0; }
  };
  // What the index knows of a worker beyond the tracker's state.
  struct WorkerInfo {
    int64_t last_step = -1;  // highest step it saved a record at
    int64_t committed = -1;  // highest step it committed (not kAll when CLOSED)
    std::string lost_reason;
    double lost_unix = 0;
    uint32_t attempt = 0;
    std::vector<v1::WorkerRestart> restarts;  // the last kMaxRecordedRestarts
  };
  v1::WorkerStatus StatusLocked(int id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A block's name range points at the names of tensors_, whose nodes never
  // move nor go away: copies of the names (two strings, ~64 bytes and often a
  // heap allocation each) made most of the ~350 bytes a step of a one-tensor
  // trial held in memory, more than the step took on disk.
  struct StoredBlock {
    uint64_t id;
    const std::string* first_name;
    const std::string* last_name;
    uint16_t worker;
  };

  friend class Notifier;
  friend class TrialSubscription;

  void ApplyLocked(const TrialUpdate& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<TrialSubscription> AddListener(std::function<void()> fn, bool watcher)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(listeners_mu_);
  void RemoveListener(uint64_t id, bool watcher);
  // Runs every listener (the Notifier's thread).
  void NotifyListeners();
  int WorkerIdLocked(const std::string& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int FindWorkerLocked(const std::string& worker) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The global step of (mode, step), if saved.
  std::optional<uint64_t> ToGlobalLocked(uint64_t step, int mode) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool VisibleLocked(uint64_t global, bool show_incomplete) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  StepState HasPassedStepLocked(uint64_t step, int mode) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status StepErrorLocked(const std::string& tensor, uint64_t step, int mode) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The stored copy of a block's first or last name (StoredBlock).
  const std::string& NameLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<const TensorEntry*> FindTensorLocked(const std::string& tensor) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::string name_;

  // Between two slices of a walk (kStepsPerLockHold), lets a writer waiting
  // for mu_ in first: a reader that took the lock again at once kept it from
  // a writer that was being woken (absl::Mutex lets a reader in meanwhile),
  // so the committer waited for whole walks: 0.5-0.8 s while a client listed
  // a 3,000,000-step trial's steps in a loop. Bounded: a writer stuck for
  // another reason does not hold up the walk for more than ~1 ms.
  void LetWritersIn() const;
  // Writers waiting for mu_ (Apply: the committer's writes).
  mutable std::atomic<int> writers_waiting_{0};

  mutable absl::Mutex mu_;
  absl::btree_map<uint64_t, StepInfo> steps_ ABSL_GUARDED_BY(mu_);
  // Bit m: a step of mode m was saved (modes() and summaries without a walk
  // over every step).
  uint8_t step_modes_ ABSL_GUARDED_BY(mu_) = 0;
  // The same steps, for listing them (server/step_list.h).
  StepList step_list_ ABSL_GUARDED_BY(mu_);
  std::map<int, absl::btree_map<uint64_t, uint64_t>> mode_steps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> worker_names_ ABSL_GUARDED_BY(mu_);  // by id
  absl::flat_hash_map<std::string, int> worker_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerInfo> worker_info_ ABSL_GUARDED_BY(mu_);  // by id
  std::map<std::string, TensorEntry> tensors_ ABSL_GUARDED_BY(mu_);
  // The same entries by hash (a write looks up every record's name).
  absl::flat_hash_map<std::string, TensorEntry*> tensor_lookup_ ABSL_GUARDED_BY(mu_);
  // The workers of tensors_' steps saved by more than WorkerSet::kInline.
  WorkerSetPool worker_sets_ ABSL_GUARDED_BY(mu_);
  // global step -> its blocks, in the order written (ids increase). A btree:
  // steps mostly come in order, and its nodes are full then (a hash map's
  // slots are a third empty on average).
  absl::btree_map<uint64_t, absl::InlinedVector<StoredBlock, 1>> blocks_ ABSL_GUARDED_BY(mu_);
  // Block names that are no saved tensor's (none is expected: a block holds
  // the records applied with it).
  std::set<std::string> other_block_names_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::string>> collections_ ABSL_GUARDED_BY(mu_);
  CollectionConfigs collection_configs_ ABSL_GUARDED_BY(mu_);
  StepTracker tracker_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::RuleStatus> rules_ ABSL_GUARDED_BY(mu_);
  // Change number -> rule, and the reverse: each rule under its last change.
  std::map<uint64_t, std::string> rule_changes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> rule_change_of_ ABSL_GUARDED_BY(mu_);
  uint64_t rule_change_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  double ended_unix_ ABSL_GUARDED_BY(mu_) = 0;
  bool deleted_ ABSL_GUARDED_BY(mu_) = false;
  std::string deleted_by_ ABSL_GUARDED_BY(mu_);
  double deleted_unix_ ABSL_GUARDED_BY(mu_) = 0;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);

  const std::shared_ptr<Notifier> notifier_;
  std::atomic<bool> unpublished_{false};
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> rewrites_{0};
  std::atomic<size_t> listener_count_{0};   // listeners_.size(), read without the lock
  std::atomic<bool> notify_queued_{false};  // in the Notifier's queue (its flag)

  mutable absl::Mutex listeners_mu_;
  // Shared with NotifyListeners' snapshot, so a listener removed while it
  // runs is not destroyed under it.
  absl::flat_hash_map<uint64_t, std::shared_ptr<const std::function<void()>>> listeners_
      ABSL_GUARDED_BY(listeners_mu_);
  uint64_t next_listener_id_ ABSL_GUARDED_BY(listeners_mu_) = 1;
  size_t watchers_ ABSL_GUARDED_BY(listeners_mu_) = 0;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_TRIAL_H_
