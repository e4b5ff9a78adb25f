// Executor: a fixed pool of threads with a bounded queue, for the work a
// gRPC reaction must not do itself (gRPC's callback API runs reactions on
// its own few threads: a blocking read or a large reduction there stalls
// unrelated calls). Handlers hand a task over and finish their call from it.
//
// Thread safety: every method is thread-safe. Tasks run in FIFO order, up to
// `threads` at once; the destructor runs the tasks already queued, then
// joins the threads.
#ifndef TENSORKEEP_SERVER_EXECUTOR_H_
#define TENSORKEEP_SERVER_EXECUTOR_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tensorkeep {

struct ExecutorOptions {
  // Threads running tasks.
  size_t threads = 2;
  // Tasks waiting for a thread, beyond which Schedule refuses new ones.
  size_t max_queued = 4096;
};

class Executor {
 public:
  explicit Executor(const ExecutorOptions& options = {});
  ~Executor();

  // Queues `task`; ResourceExhausted (saying so) when max_queued tasks wait
  // already: the caller fails its call rather than buffer without bound.
  absl::Status Schedule(std::function<void()> task);

  // Tasks finished so far (tests and metrics).
  size_t completed() const;

 private:
  void Run();

  const ExecutorOptions options_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  size_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_EXECUTOR_H_
