// WorkerRegistry: which workers have a live Push stream, and how long the
// others have been gone.
//
// A Push stream claims its (trial, worker) from its Open until it ends: one
// live stream per worker. When a stream ends, the worker's timeout starts:
// if no stream claims it again within `timeout`, the registry calls
// `on_timeout` (on its own thread), which asks the committer to make the
// worker LOST (server/committer.h; the committer ignores it for a worker
// CLOSED or LOST meanwhile). A worker that comes back between the timeout and
// that write is not made LOST: the write's precondition asks StillGone() with
// the generation of the absence the timeout was about. After a restart, the
// collector starts the timeout of every ACTIVE worker of a running trial
// (Expect), as if its stream had just ended: a restarted collector neither
// waits forever for a worker that died while it was down nor declares lost
// one that reconnects in time.
//
// Thread safety: every method is thread-safe. `on_timeout` runs on the
// registry's thread without its lock held; it must not block.
#ifndef TENSORKEEP_SERVER_WORKER_REGISTRY_H_
#define TENSORKEEP_SERVER_WORKER_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensorkeep {

struct WorkerRegistryOptions {
  // How long a worker may be without a stream before it is LOST; zero or
  // negative: never by time (only DeclareWorkerLost).
  absl::Duration timeout = absl::Seconds(60);
  // Live Push streams accepted at once.
  size_t max_streams = 4096;
};

class WorkerRegistry {
 public:
  // Called when a worker's timeout passed: (trial, worker, generation).
  using OnTimeout = std::function<void(const std::string&, const std::string&, uint64_t)>;

  WorkerRegistry(const WorkerRegistryOptions& options, OnTimeout on_timeout);
  // Stops the thread: no `on_timeout` runs after it returns. The other
  // methods still work. Idempotent.
  void Stop();
  ~WorkerRegistry();
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // Claims (trial, worker) for one stream and returns the claim's id; stops
  // its timeout. While another stream holds it: Conflict for a first stream
  // (`resume` false: another process writes as this worker), Unavailable for
  // a writer's later stream (`resume`: its old stream has not been seen to end
  // yet; it retries). ResourceExhausted at max_streams.
  absl::StatusOr<uint64_t> Claim(const std::string& trial, const std::string& worker,
                                 bool resume);
  // Releases claim `id` (nothing if it is not the current one) and starts
  // the worker's timeout.
  void Release(const std::string& trial, const std::string& worker, uint64_t id);
  // Starts the timeout of a worker that has no stream (recovery).
  void Expect(const std::string& trial, const std::string& worker);
  // No stream claimed the worker since the absence `generation` began.
  bool StillGone(const std::string& trial, const std::string& worker, uint64_t generation) const;
  bool Connected(const std::string& trial, const std::string& worker) const;
  size_t live_streams() const;
  const WorkerRegistryOptions& options() const { return options_; }

 private:
  using Key = std::pair<std::string, std::string>;  // (trial, worker)
  struct Entry {
    uint64_t claim = 0;                            // the live stream's claim id; 0: none
    uint64_t generation = 0;                       // of the current absence (or claim)
    absl::Time deadline = absl::InfiniteFuture();  // timeout of the absence
  };
  void StartAbsenceLocked(const Key& key, Entry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets `entry`'s deadline, keeping deadlines_ in step.
  void SetDeadlineLocked(const Key& key, Entry* entry, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();

  const WorkerRegistryOptions options_;
  const OnTimeout on_timeout_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  // Entries of live streams and of absences whose timeout has not passed.
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // The finite deadlines of entries_, soonest first: Run looks at the due
  // ones only, so a wake costs O(log n), not a walk over every worker.
  std::set<std::pair<absl::Time, Key>> deadlines_ ABSL_GUARDED_BY(mu_);
  size_t live_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;  // claim ids and generations
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_WORKER_REGISTRY_H_
