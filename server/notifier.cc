#include "server/notifier.h"

#include <utility>

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
  }
}

}  // namespace tensorkeep
