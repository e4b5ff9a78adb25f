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
// Listeners of every trial (WatchTrials: the HTTP API's trial-list event
// streams) are called on the same thread with each trial that changed, after
// the trial's own listeners, and with each trial the collector creates.
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
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/limits.pb.h"

namespace tensorkeep {

class Trial;

struct NotifierOptions {
  // Watchers of the whole collector, and of one trial (proto/limits.proto).
  size_t max_watchers = v1::MAX_WATCHERS;
  size_t max_trial_watchers = v1::MAX_TRIAL_WATCHERS;
};

class Notifier;

// A WatchTrials listener, removed (and its watcher slot freed) when the last
// copy is destroyed. As with TrialSubscription, the callback may still be
// running on the notifier thread at that moment.
class TrialsSubscription {
 public:
  TrialsSubscription(std::shared_ptr<Notifier> notifier, uint64_t id)
      : notifier_(std::move(notifier)), id_(id) {}
  ~TrialsSubscription();
  TrialsSubscription(const TrialsSubscription&) = delete;
  TrialsSubscription& operator=(const TrialsSubscription&) = delete;

 private:
  const std::shared_ptr<Notifier> notifier_;
  const uint64_t id_;
};

// Always held by a std::shared_ptr (TrialsSubscription keeps it alive).
class Notifier : public std::enable_shared_from_this<Notifier> {
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

  // Calls `fn` with every trial that changes or is created from now on (on
  // the notifier thread; it must only note the trial and return). Takes one
  // watcher slot of the collector: ResourceExhausted when none is free.
  using TrialsListener = std::function<void(const std::shared_ptr<Trial>&)>;
  absl::StatusOr<std::shared_ptr<TrialsSubscription>> WatchTrials(TrialsListener fn);
  // Whether any WatchTrials listener is registered (a trial with no listener
  // of its own signals only then).
  bool trials_watched() const { return trials_listener_count_.load() > 0; }

  // Runs the listeners of trials still queued, then ends the thread.
  void Stop();

 private:
  friend class TrialsSubscription;
  void Run();
  void RemoveTrialsListener(uint64_t id);

  const NotifierOptions options_;
  std::atomic<size_t> watchers_{0};

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Trial>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;

  absl::Mutex listeners_mu_;
  uint64_t next_listener_id_ ABSL_GUARDED_BY(listeners_mu_) = 0;
  std::map<uint64_t, std::shared_ptr<const TrialsListener>> trials_listeners_
      ABSL_GUARDED_BY(listeners_mu_);
  std::atomic<size_t> trials_listener_count_{0};
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_NOTIFIER_H_
