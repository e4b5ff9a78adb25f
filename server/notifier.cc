#include "server/notifier.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include "server/trial.h"

namespace tensorkeep {

Notifier::Notifier(const NotifierOptions& options) : options_(options) {
  thread_ = std::thread([this] { Run(); });
}

Notifier::~Notifier() { Stop(); }

void Notifier::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  thread_.join();
}

void Notifier::Signal(std::shared_ptr<Trial> trial) {
  // One queue entry a trial: the flag is cleared when the entry is taken,
  // before the listeners run, so a change after that queues it again.
  if (trial->notify_queued_.exchange(true)) return;
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    trial->notify_queued_.store(false);
    return;
  }
  queue_.push_back(std::move(trial));
}

bool Notifier::TryAcquireWatcher() {
  size_t n = watchers_.load();
  while (n < options_.max_watchers) {
    if (watchers_.compare_exchange_weak(n, n + 1)) return true;
  }
  return false;
}

void Notifier::ReleaseWatcher() { watchers_.fetch_sub(1); }

absl::StatusOr<std::shared_ptr<TrialsSubscription>> Notifier::WatchTrials(TrialsListener fn) {
  if (!TryAcquireWatcher()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the collector has ", options_.max_watchers,
        " waiting or watching calls (WaitForSteps, WatchSteps, WatchRuleStatuses, event "
        "streams), its limit (MAX_WATCHERS): retry later, or end some first"));
  }
  absl::MutexLock lock(&listeners_mu_);
  const uint64_t id = next_listener_id_++;
  trials_listeners_.emplace(id, std::make_shared<const TrialsListener>(std::move(fn)));
  trials_listener_count_.store(trials_listeners_.size());
  return std::make_shared<TrialsSubscription>(shared_from_this(), id);
}

void Notifier::RemoveTrialsListener(uint64_t id) {
  absl::MutexLock lock(&listeners_mu_);
  if (trials_listeners_.erase(id) == 0) return;
  trials_listener_count_.store(trials_listeners_.size());
  ReleaseWatcher();
}

TrialsSubscription::~TrialsSubscription() { notifier_->RemoveTrialsListener(id_); }

void Notifier::Run() {
  for (;;) {
    std::shared_ptr<Trial> trial;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Notifier* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->mu_) {
            return n->stopping_ || !n->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      trial = std::move(queue_.front());
      queue_.pop_front();
    }
    trial->notify_queued_.store(false);
    trial->NotifyListeners();
    if (trials_listener_count_.load() == 0) continue;
    std::vector<std::shared_ptr<const TrialsListener>> live;
    {
      absl::MutexLock lock(&listeners_mu_);
      live.reserve(trials_listeners_.size());
      for (const auto& [id, fn] : trials_listeners_) live.push_back(fn);
    }
    for (const auto& fn : live) (*fn)(trial);
  }
}

}  // namespace tensorkeep
