// Trial's listeners: subscriptions of the waiting and watching calls, run on
// the Notifier's thread after a commit changed the trial.
#include <algorithm>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "re2/re2.h"
#include "server/trial.h"
#include "server/validation.h"

namespace tensorkeep {

void Trial::NotifyListeners() {
  std::vector<std::shared_ptr<const std::function<void()>>> live;
  {
    absl::MutexLock lock(&listeners_mu_);
    live.reserve(listeners_.size());
    for (const auto& [id, fn] : listeners_) live.push_back(fn);
  }
  for (const auto& fn : live) (*fn)();
}

std::shared_ptr<TrialSubscription> Trial::AddListener(std::function<void()> fn, bool watcher) {
  const uint64_t id = next_listener_id_++;
  listeners_.emplace(id, std::make_shared<const std::function<void()>>(std::move(fn)));
  listener_count_.store(listeners_.size());
  if (watcher) ++watchers_;
  return std::make_shared<TrialSubscription>(shared_from_this(), id, watcher);
}

void Trial::RemoveListener(uint64_t id, bool watcher) {
  absl::MutexLock lock(&listeners_mu_);
  if (listeners_.erase(id) == 0) return;
  listener_count_.store(listeners_.size());
  if (watcher) {
    --watchers_;
    if (notifier_ != nullptr) notifier_->ReleaseWatcher();
  }
}

TrialSubscription::~TrialSubscription() { trial_->RemoveListener(id_, watcher_); }

std::shared_ptr<TrialSubscription> Trial::Subscribe(std::function<void()> fn) {
  absl::MutexLock lock(&listeners_mu_);
  return AddListener(std::move(fn), /*watcher=*/false);
}

absl::StatusOr<std::shared_ptr<TrialSubscription>> Trial::Watch(std::function<void()> fn) {
  absl::MutexLock lock(&listeners_mu_);
  if (notifier_ != nullptr) {
    const NotifierOptions& limits = notifier_->options();
    if (watchers_ >= limits.max_trial_watchers) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "trial '", name_, "' has ", watchers_,
          " waiting or watching calls (WaitForSteps, WatchSteps, WatchRuleStatuses), its limit "
          "(MAX_TRIAL_WATCHERS): end some first, or share one watch between readers"));
    }
    if (!notifier_->TryAcquireWatcher()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the collector has ", limits.max_watchers,
          " waiting or watching calls (WaitForSteps, WatchSteps, WatchRuleStatuses), its limit "
          "(MAX_WATCHERS): retry later, or end some first"));
    }
  }
  return AddListener(std::move(fn), /*watcher=*/true);
}

size_t Trial::listeners() const {
  absl::MutexLock lock(&listeners_mu_);
  return listeners_.size();
}

size_t Trial::watchers() const {
  absl::MutexLock lock(&listeners_mu_);
  return watchers_;
}

}  // namespace tensorkeep
