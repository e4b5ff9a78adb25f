#include "bench/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace tensorkeep {
namespace bench {
namespace {

double Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(const std::vector<std::string>& argv,
                                                              const std::vector<std::string>& env,
                                                              bool quiet_stderr) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  // The environment: ours, with `env` replacing same-named entries.
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& add : env) {
      if (add.substr(0, add.find('=')) == name) replaced = true;
    }
    if (!replaced) envs.push_back(entry);
  }
  for (const std::string& add : env) envs.push_back(add);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (quiet_stderr) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start ", argv[0], ": ", strerror(rc)));
  }
  return std::unique_ptr<Subprocess>(new Subprocess(pid, fds[0]));
}

Subprocess::~Subprocess() {
  if (!exited_) {
    kill(pid_, SIGKILL);
    Wait(10);
  }
  close(out_fd_);
}

bool Subprocess::Fill(double deadline) {
  for (;;) {
    const double left = deadline - Now();
    if (left <= 0) return false;
    struct pollfd p = {out_fd_, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;  // re-checks the deadline
    char buf[65536];
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof_ = true;
      return true;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }
}

absl::StatusOr<std::string> Subprocess::ReadLine(double timeout_seconds) {
  const double deadline = Now() + timeout_seconds;
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (eof_) return absl::OutOfRangeError("end of output");
    if (!Fill(deadline)) return absl::DeadlineExceededError("no line within the time limit");
  }
}

absl::StatusOr<std::string> Subprocess::ReadAll(double timeout_seconds) {
  const double deadline = Now() + timeout_seconds;
  while (!eof_) {
    if (!Fill(deadline)) {
      Signal(SIGKILL);
      return absl::DeadlineExceededError(
          absl::StrCat("child ", pid_, " still running after ", timeout_seconds, " s; killed"));
    }
  }
  std::string out = std::move(buffer_);
  buffer_.clear();
  return out;
}

void Subprocess::Signal(int sig) {
  if (!exited_) kill(pid_, sig);
}

int Subprocess::Wait(double timeout_seconds) {
  if (exited_) return exit_code_;
  const double deadline = Now() + timeout_seconds;
  bool killed = false;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) {
      exited_ = true;
      exit_code_ = -1;
      return exit_code_;
    }
    if (!killed && Now() > deadline) {
      kill(pid_, SIGKILL);
      killed = true;
    }
    if (killed && Now() > deadline + 30) {  // not reaped 30 s after SIGKILL: give up
      exited_ = true;
      exit_code_ = -1;
      return exit_code_;
    }
    usleep(10000);
  }
}

Rss ReadRss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  Rss out;
  while (std::getline(in, line)) {
    uint64_t kb = 0;
    auto parse = [&](const char* key, uint64_t* into) {
      if (line.rfind(key, 0) != 0) return;
      std::string rest = line.substr(std::strlen(key));
      rest.erase(std::remove_if(rest.begin(), rest.end(), [](char c) { return !isdigit(c); }),
                 rest.end());
      if (absl::SimpleAtoi(rest, &kb)) *into = kb * 1024;
    };
    parse("VmHWM:", &out.hwm);
    parse("VmRSS:", &out.rss);
    parse("RssAnon:", &out.anon);
    parse("RssFile:", &out.file);
  }
  return out;
}

double ReadCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) in parentheses:
  // state is field 3, utime 14 and stime 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && (fields >> field); ++i) {
    if (i == 14) utime = std::atof(field.c_str());
    if (i == 15) stime = std::atof(field.c_str());
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

absl::StatusOr<ServerProcess> SpawnServer(const std::string& server_binary,
                                          const std::string& data_dir,
                                          const std::vector<std::string>& extra_args) {
  ServerProcess out;
  std::vector<std::string> args = {server_binary, "--listen",    "127.0.0.1:0", "--data-dir",
                                   data_dir,      "--log-level", "warn"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const bool http =
      std::find(extra_args.begin(), extra_args.end(), "--http-listen") != extra_args.end();
  auto spawned = Subprocess::Spawn(args, {}, /*quiet_stderr=*/false);
  if (!spawned.ok()) return spawned.status();
  out.process = std::move(*spawned);
  auto line = out.process->ReadLine(30);
  if (!line.ok()) return line.status();
  const std::string prefix = "listening on ";
  if (line->rfind(prefix, 0) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensorkeep-server printed '", *line, "' instead of '", prefix, "...'"));
  }
  out.address = line->substr(prefix.size());
  if (http) {
    auto second = out.process->ReadLine(30);
    if (!second.ok()) return second.status();
    const std::string http_prefix = "http listening on ";
    if (second->rfind(http_prefix, 0) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensorkeep-server printed '", *second, "' instead of '", http_prefix, "...'"));
    }
    out.http_address = second->substr(http_prefix.size());
  }
  return out;
}

}  // namespace bench
}  // namespace tensorkeep
