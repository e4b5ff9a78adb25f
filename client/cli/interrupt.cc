#include "client/cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

namespace tensorkeep {
namespace cli {
namespace {

int g_write_fd = -1;
struct sigaction g_old_int, g_old_term;

void OnSignal(int sig) {
  const char c = static_cast<char>(sig);
  if (g_write_fd >= 0) (void)!write(g_write_fd, &c, 1);
}

}  // namespace

Interrupt::Interrupt(std::function<void()> on_interrupt) : on_interrupt_(std::move(on_interrupt)) {
  if (pipe(pipe_) != 0) return;
  g_write_fd = pipe_[1];
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  waiter_ = std::thread([this] {
    char c;
    // 0 ('\0') is the destructor's wake-up; anything else a signal.
    if (read(pipe_[0], &c, 1) == 1 && c != 0) {
      interrupted_.store(true);
      on_interrupt_();
    }
  });
}

Interrupt::~Interrupt() {
  if (pipe_[1] < 0) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_write_fd = -1;
  const char zero = 0;
  (void)!write(pipe_[1], &zero, 1);
  waiter_.join();
  close(pipe_[0]);
  close(pipe_[1]);
}

}  // namespace cli
}  // namespace tensorkeep
