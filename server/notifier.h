// Notifier: carries "this trial changed" from the commit loop to the trial's
// listeners (waits, watches, Push streams waiting for stop requests) on a
// thread of its own.
//
// The committer never runs listener code: Trial::Apply bumps the trial's
// version and calls Signal(), which queues the trial at most once (O(1), a
// short lock). The notifier thread takes queued trials in order and runs
// their listeners; several commits of a trial while it waits in the queue
// wake its listeners once. A listener re-checks its own condition and must
// do work of the order of what changed, not of what it waits for (see
// WaitReactor).
//
// It also keeps the collector-wide count of watchers (WaitForSteps,
// WatchSteps, WatchRuleStatuses calls) against `max_watchers`; a trial
// counts its own against `max_trial_watchers` (Trial::Watch).
//
// Thread safety: every method is thread-safe. Stop() ends the thread; after
// it Signal() does nothing (no trial changes once the committer is gone).
#ifndef TENSORKEEP_SERVER_NOTIFIER_H_
#define TENSORKEEP_SERVER_NOTIFIER_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/limits.pb.h"

namespace tensorkeep {

class Trial;

struct NotifierOptions {
  // Watchers of the whole collector, and of one trial (proto/limits.proto).
  size_t max_watchers = v1::MAX_WATCHERS;
  size_t max_trial_watchers = v1::MAX_TRIAL_WATCHERS;
};

class Notifier {
 public:
  explicit Notifier(const NotifierOptions& options = {});
  // Stops the thread.
  ~Notifier();

  const NotifierOptions& options() const { return options_; }

  // Queues `trial` (unless queued already) for its listeners to run on the
  // notifier thread. Never blocks on listeners.
  void Signal(std::shared_ptr<Trial> trial);

  // Takes one watcher slot of the collector; false when all are taken.
  bool TryAcquireWatcher();
  void ReleaseWatcher();
  // Live watchers of the whole collector.
  size_t watchers() const { return watchers_.load(); }

  // Runs the listeners of trials still queued, then ends the thread.
  void Stop();

 private:
  void Run();

  const NotifierOptions options_;
  std::atomic<size_t> watchers_{0};

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Trial>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_NOTIFIER_H_
