// Subprocess: a child process of tensorkeep-bench (tensorkeep-server for the
// memory benchmark, /usr/bin/python3 for the Python ones) with its standard
// output on a pipe. Every wait is bounded; a child still running when the
// object is destroyed is killed (by its pid) and reaped.
//
// Thread safety: none; one thread uses an object.
#ifndef TENSORKEEP_BENCH_SUBPROCESS_H_
#define TENSORKEEP_BENCH_SUBPROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorkeep {
namespace bench {

// Peak and current RSS of a process, from /proc/PID/status, in bytes (all
// zero if the process is gone).
struct Rss {
  uint64_t hwm = 0;   // VmHWM: peak resident set
  uint64_t rss = 0;   // VmRSS
  uint64_t anon = 0;  // RssAnon: heap, stacks, anonymous mappings
  uint64_t file = 0;  // RssFile: resident pages of mapped files (LevelDB's tables)
};
Rss ReadRss(pid_t pid);
// The CPU seconds (user + system) process `pid` has used so far; 0 when it
// cannot be read.
double ReadCpuSeconds(pid_t pid);

class Subprocess {
 public:
  // Starts argv[0] (a path) with `argv`, the environment of this process plus
  // `env` ("NAME=value", replacing NAME if set). Its stderr goes to ours
  // unless `quiet_stderr`.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(const std::vector<std::string>& argv,
                                                           const std::vector<std::string>& env,
                                                           bool quiet_stderr);
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // The next line of its stdout (without '\n'); DeadlineExceeded after
  // `timeout_seconds`, OutOfRange at end of file.
  absl::StatusOr<std::string> ReadLine(double timeout_seconds);
  // The rest of its stdout up to end of file; DeadlineExceeded after
  // `timeout_seconds` (the child is then killed).
  absl::StatusOr<std::string> ReadAll(double timeout_seconds);
  // Sends `sig` to the child (if it still runs).
  void Signal(int sig);
  // Waits for the child to exit, SIGKILLing it after `timeout_seconds`.
  // Returns its exit code (128 + signal if killed by one).
  int Wait(double timeout_seconds);

 private:
  Subprocess(pid_t pid, int out_fd) : pid_(pid), out_fd_(out_fd) {}
  // Reads more of stdout into buffer_, waiting until `deadline` (monotonic
  // seconds). False on timeout; sets eof_ at end of file.
  bool Fill(double deadline);

  pid_t pid_;
  int out_fd_;
  bool exited_ = false;
  int exit_code_ = 0;
  bool eof_ = false;
  std::string buffer_;
};

// A tensorkeep-server started by SpawnServer, and the HOST:PORT it serves on.
struct ServerProcess {
  std::unique_ptr<Subprocess> process;
  std::string address;
  std::string http_address;  // with --http-listen in `extra_args`
};
// Starts `server_binary` on a free loopback port with `data_dir` (log level
// warn, its stderr to ours) and `extra_args`, and waits up to 30 s for its
// `listening on` line (and with --http-listen, its `http listening on`).
absl::StatusOr<ServerProcess> SpawnServer(const std::string& server_binary,
                                          const std::string& data_dir,
                                          const std::vector<std::string>& extra_args = {});

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_SUBPROCESS_H_
