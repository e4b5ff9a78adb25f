// Runs tensorkeep-server as a child process (for crash and signal tests):
// waits for its "listening on HOST:PORT" line instead of sleeping (and, with
// --http-listen, for its second line "http listening on HOST:PORT").
#ifndef TENSORKEEP_TESTS_SERVER_SERVER_PROCESS_H_
#define TENSORKEEP_TESTS_SERVER_SERVER_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/server/child_argv.h"
namespace tensorkeep {
namespace testing {

inline std::string ServerBinary() {
  const char* dir = std::getenv("TK_BIN_DIR");
  return std::string(dir != nullptr ? dir : "build/bin") + "/tensorkeep-server";
}

class ServerProcess {
 public:
  // Starts the server; returns false if it exits before listening. `first_line`
  // and `stderr_text` receive what it printed.
  bool Start(const std::vector<std::string>& args) {
    const ChildArgv child(ServerBinary(), args);  // before fork()
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]);
      close(err[0]);
      execv(child.path(), child.argv());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_ = fdopen(out[0], "r");
    err_fd_ = err[0];
    char line[512];
    if (std::fgets(line, sizeof(line), out_) == nullptr) {
      ReadStderr();
      return false;
    }
    first_line = line;
    if (!first_line.empty() && first_line.back() == '\n') first_line.pop_back();
    const std::string prefix = "listening on ";
    if (first_line.rfind(prefix, 0) != 0) return false;
    address = first_line.substr(prefix.size());
    bool http = false;
    for (const auto& a : args) http = http || a == "--http-listen";
    if (http) {
      if (std::fgets(line, sizeof(line), out_) == nullptr) return false;
      std::string second = line;
      if (!second.empty() && second.back() == '\n') second.pop_back();
      const std::string http_prefix = "http listening on ";
      if (second.rfind(http_prefix, 0) != 0) return false;
      http_address = second.substr(http_prefix.size());
    }
    return true;
  }
  // Waits for the process to exit and returns its wait status.
  int Wait() {
    int status = 0;
    if (pid_ > 0) waitpid(pid_, &status, 0);
    pid_ = -1;
    ReadStderr();
    return status;
  }
  pid_t pid() const { return pid_; }
  // The process's peak resident memory (VmHWM) in bytes, 0 if unknown.
  uint64_t PeakRssBytes() const { return StatusBytes("VmHWM:"); }
  // Its resident memory now (VmRSS).
  uint64_t RssBytes() const { return StatusBytes("VmRSS:"); }
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
    if (out_ != nullptr) fclose(out_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  std::string first_line;
  std::string address;
  std::string http_address;  // with --http-listen
  std::string stderr_text;

 private:
  uint64_t StatusBytes(const std::string& field) const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) * 1024;
    }
    return 0;
  }
  void ReadStderr() {
    if (err_fd_ < 0) return;
    char buf[4096];
    ssize_t n;
    while ((n = read(err_fd_, buf, sizeof(buf))) > 0) stderr_text.append(buf, n);
    close(err_fd_);
    err_fd_ = -1;
  }

  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int err_fd_ = -1;
};

}  // namespace testing
}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_SERVER_SERVER_PROCESS_H_
