// Runs tensorkeep-rules as a child process and waits for it with a bound;
// and waits for rule statuses through the collector's WatchRuleStatuses
// stream (no polling, no sleeps).
#ifndef TENSORKEEP_TESTS_RULES_RULE_WORKER_PROCESS_H_
#define TENSORKEEP_TESTS_RULES_RULE_WORKER_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/connection.h"
#include "proto/tensorkeep.grpc.pb.h"
#include "tests/server/child_argv.h"

namespace tensorkeep {
namespace rules_testing {

inline std::string RuleWorkerBinary() {
  const char* dir = std::getenv("TK_BIN_DIR");
  return std::string(dir != nullptr ? dir : "build/bin") + "/tensorkeep-rules";
}

class RuleWorkerProcess {
 public:
  // Starts tensorkeep-rules with `args`; its stderr (and stdout) are
  // collected. Returns false if it could not be started.
  bool Start(const std::vector<std::string>& args) {
    const testing::ChildArgv child(RuleWorkerBinary(), args);  // before fork()
    int out[2];
    if (pipe(out) != 0) return false;
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(out[1], 2);
      close(out[0]);
      close(out[1]);
      execv(child.path(), child.argv());
      _exit(127);
    }
    close(out[1]);
    reader_ = std::thread([this, fd = out[0]] {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        output_.append(buf, static_cast<size_t>(n));
      }
      close(fd);
    });
    pid_t pid = pid_;
    exit_ = std::async(std::launch::async, [pid] {
      int status = 0;
      waitpid(pid, &status, 0);
      return status;
    });
    return true;
  }

  // The exit code once the process exited within `bound`; nullopt (after
  // killing it) otherwise, or when it died of a signal.
  std::optional<int> Wait(std::chrono::seconds bound = std::chrono::seconds(30)) {
    if (!exit_.valid()) return exit_code_;
    if (exit_.wait_for(bound) != std::future_status::ready) {
      kill(pid_, SIGKILL);
      exit_.wait();
    }
    int status = exit_.get();
    pid_ = -1;
    if (reader_.joinable()) reader_.join();
    if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
    return exit_code_;
  }

  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }

  std::string output() {
    std::lock_guard<std::mutex> lock(mu_);
    return output_;
  }

  ~RuleWorkerProcess() {
    if (pid_ > 0) kill(pid_, SIGKILL);
    if (exit_.valid()) exit_.wait();
    if (reader_.joinable()) reader_.join();
  }

 private:
  pid_t pid_ = -1;
  std::future<int> exit_;
  std::optional<int> exit_code_;
  std::thread reader_;
  std::mutex mu_;
  std::string output_;
};

// Watches the rule statuses of `trial` until `done(status)` holds for one,
// which it returns; nullopt after `bound` or if the stream fails.
inline std::optional<v1::RuleStatus> WaitForRuleStatus(
    const Connection& connection, const std::string& trial,
    const std::function<bool(const v1::RuleStatus&)>& done,
    std::chrono::seconds bound = std::chrono::seconds(30)) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + bound);
  v1::WatchRuleStatusesRequest request;
  request.set_trial(trial);
  auto reader = connection.stub()->WatchRuleStatuses(&context, request);
  v1::RuleStatus status;
  std::optional<v1::RuleStatus> found;
  while (reader->Read(&status)) {
    if (done(status)) {
      found = status;
      break;
    }
  }
  context.TryCancel();
  reader->Finish();
  return found;
}

}  // namespace rules_testing
}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_RULES_RULE_WORKER_PROCESS_H_
