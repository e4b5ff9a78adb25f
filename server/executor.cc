#include "server/executor.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tensorkeep {

Executor::Executor(const ExecutorOptions& options) : options_(options) {
  const size_t n = options_.threads == 0 ? 1 : options_.threads;
  for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { Run(); });
}

Executor::~Executor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

absl::Status Executor::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the collector has ", queue_.size(),
        " reads and reductions queued, its limit: retry later, or ask for fewer at once"));
  }
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

size_t Executor::completed() const {
  absl::MutexLock lock(&mu_);
  return completed_;
}

void Executor::Run() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Executor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
            return e->stopping_ || !e->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
    absl::MutexLock lock(&mu_);
    ++completed_;
  }
}

}  // namespace tensorkeep
