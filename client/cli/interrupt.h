// Interrupt: turns SIGINT / SIGTERM into a callback run on an ordinary thread
// (cancelling a gRPC call is not async-signal-safe), so that a long-running
// command (export-tensorboard --follow) can stop its stream and close its
// files cleanly. One at a time per process; the previous handlers are
// restored on destruction.
#ifndef TENSORKEEP_CLIENT_CLI_INTERRUPT_H_
#define TENSORKEEP_CLIENT_CLI_INTERRUPT_H_

#include <atomic>
#include <functional>
#include <thread>

namespace tensorkeep {
namespace cli {

class Interrupt {
 public:
  // `on_interrupt` runs once, on a helper thread, at the first signal.
  explicit Interrupt(std::function<void()> on_interrupt);
  ~Interrupt();
  bool interrupted() const { return interrupted_.load(); }

 private:
  std::function<void()> on_interrupt_;
  std::atomic<bool> interrupted_{false};
  int pipe_[2] = {-1, -1};
  std::thread waiter_;
};

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_INTERRUPT_H_
