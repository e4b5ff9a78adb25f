// tensorkeep-agent: takes the tensors training processes hand over through a
// Unix socket and shared memory, and pushes them to the collector (one
// client::Writer per writer the processes open). The Python client starts it
// on first use; see docs/architecture.md.
//
//   tensorkeep-agent [--socket PATH] [--memory-budget-mb N] [--max-clients N]
//                    [--idle-exit-seconds S] [--linger-ms MS] [--daemonize]
//                    [--journal-dir DIR] [--journal-max-mb N]
//                    [--leftover-hold-seconds S] [--leftover-retry-seconds S]
//                    [--log-level trace|debug|info|warn|error]
//
// Prints "listening on PATH" (or "already running on PATH" when an agent
// holds that socket) as its first line on standard output. With --daemonize
// it does so once the agent, in the background, listens, and exits.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "agent/agent_server.h"
#include "base/process_tuning.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kUsage[] =
    "usage: tensorkeep-agent [--socket PATH] [--memory-budget-mb N] [--max-clients N]\n"
    "                        [--idle-exit-seconds S] [--linger-ms MS] [--daemonize]\n"
    "                        [--journal-dir DIR] [--journal-max-mb N]\n"
    "                        [--leftover-hold-seconds S] [--leftover-retry-seconds S]\n"
    "                        [--log-level trace|debug|info|warn|error]\n"
    "\n"
    "  --socket PATH         the Unix socket training processes hand tensors over on\n"
    "                        (default $TENSORKEEP_AGENT_SOCKET, else\n"
    "                        $XDG_RUNTIME_DIR/tensorkeep/agent-v2.sock, else\n"
    "                        /tmp/tensorkeep-UID/agent-v2.sock); its directory is made 0700\n"
    "  --memory-budget-mb N  memory the writers may make the agent hold in all: each\n"
    "                        writer's shared ring and push buffer (default 2048); a writer\n"
    "                        that does not fit is refused\n"
    "  --max-clients N       writers served at once (default 256)\n"
    "  --idle-exit-seconds S exit after S seconds without a connected training process\n"
    "                        (default 300; 0: never); writers whose process exited\n"
    "                        before their data was durable journal it then\n"
    "  --linger-ms MS        records not followed by an end of step or a flush wait this\n"
    "                        long before they are sent, so that a training step's tensors\n"
    "                        go as one message (default 100)\n"
    "  --journal-dir DIR     where a writer whose collector does not take its data within\n"
    "                        the client's max_stall_seconds journals it, to push it later\n"
    "                        (default $TENSORKEEP_AGENT_JOURNAL_DIR, else \"journal\" beside\n"
    "                        the socket); journals left there by an agent that ended are\n"
    "                        pushed when the agent starts, waiting for their collector\n"
    "                        for as long as the agent runs\n"
    "  --journal-max-mb N    disk all journals may use (default 4096); past it records are\n"
    "                        dropped, each logged\n"
    "  --leftover-hold-seconds S  a leftover journal whose collector is away keeps the\n"
    "                        agent from exiting idle this long (default 300); it is then\n"
    "                        pushed once the collector is back if the agent still runs,\n"
    "                        else by the next agent\n"
    "  --leftover-retry-seconds S  a leftover journal the collector refused for now (one of\n"
    "                        its limits) is tried again after S seconds (default 30)\n"
    "  --daemonize           run in the background; the first process exits once it listens\n";

bool ParseNumber(const char* s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s, &end);
  return end != s && *end == '\0' && *out >= 0;
}

int Fail(const std::string& message) {
  std::cerr << "tensorkeep-agent: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread: the values copied out of the rings reuse freed memory
  // until no writer is left (AgentServer::Serve gives it back).
  const bool tuned = tensorkeep::TuneProcessForLargeBuffers(tensorkeep::FreedMemory::kReturnWhenAsked);
  tensorkeep::agent::AgentOptions options;
  bool daemonize = false;
  std::string log_level = "info";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    double n;
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--daemonize") {
      daemonize = true;
    } else if (arg == "--socket") {
      const char* v = value();
      if (v == nullptr) return Fail("--socket needs a path");
      options.socket_path = v;
    } else if (arg == "--memory-budget-mb") {
      const char* v = value();
      if (v == nullptr || !ParseNumber(v, &n) || n < 1)
        return Fail("--memory-budget-mb needs N >= 1");
      options.memory_budget_bytes = static_cast<uint64_t>(n) << 20;
    } else if (arg == "--max-clients") {
      const char* v = value();
      if (v == nullptr || !ParseNumber(v, &n) || n < 1) return Fail("--max-clients needs N >= 1");
      options.max_clients = static_cast<size_t>(n);
    } else if (arg == "--idle-exit-seconds") {
      const char* v = value();
      if (v == nullptr || !ParseNumber(v, &n)) return Fail("--idle-exit-seconds needs S >= 0");
      options.idle_exit_seconds = n;
    } else if (arg == "--linger-ms") {
      const char* v = value();
      if (v == nullptr || !ParseNumber(v, &n) || n < 0 || n > 60000)
        return Fail("--linger-ms needs MS in [0, 60000]");
      options.linger_seconds = n / 1000;
    } else if (arg == "--journal-dir") {
      const char* v = value();
      if (v == nullptr || *v == '\0') return Fail("--journal-dir needs a directory");
      options.journal_dir = v;
    } else if (arg == "--journal-max-mb") {
      const char* v = value();
      if (v == nullptr || !ParseNumber(v, &n) || n < 1)
        return Fail("--journal-max-mb needs N >= 1");
      options.journal_max_bytes = static_cast<uint64_t>(n) << 20;
    } else if (arg == "--leftover-hold-seconds") {
      const char* v = value();
      if (v == nullptr || !ParseNumber(v, &n)) return Fail("--leftover-hold-seconds needs S >= 0");
      options.leftover_hold_seconds = n;
    } else if (arg == "--leftover-retry-seconds") {
      const char* v = value();
      if (v == nullptr || !ParseNumber(v, &n) || n > 86400)
        return Fail("--leftover-retry-seconds needs S in [0, 86400]");
      options.leftover_retry_seconds = n;
    } else if (arg == "--log-level") {
      const char* v = value();
      if (v == nullptr) return Fail("--log-level needs a level");
      log_level = v;
    } else {
      std::cerr << kUsage;
      return Fail("unknown argument " + arg);
    }
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("tensorkeep-agent"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  signal(SIGPIPE, SIG_IGN);

  // The first process reports, through a pipe, what the agent in the
  // background did: 'L' listening, 'A' already running, 'E' failed.
  int report = -1;
  if (daemonize) {
    int fds[2];
    if (pipe(fds) != 0) return Fail("pipe failed");
    const pid_t pid = fork();
    if (pid < 0) return Fail("fork failed");
    if (pid > 0) {
      close(fds[1]);
      char c = 'E';
      if (read(fds[0], &c, 1) != 1) c = 'E';
      tensorkeep::agent::AgentServer probe(options);  // for its resolved path
      if (c == 'L') std::cout << "listening on " << probe.socket_path() << std::endl;
      if (c == 'A') std::cout << "already running on " << probe.socket_path() << std::endl;
      return c == 'E' ? 1 : 0;
    }
    close(fds[0]);
    report = fds[1];
    setsid();
    const int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      close(null);
    }
  }
  const auto tell = [&](char c) {
    if (report >= 0) {
      (void)!write(report, &c, 1);
      close(report);
      report = -1;
    }
  };

  // Signals are taken by a thread of their own (blocked everywhere else).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (!tuned) spdlog::warn("glibc refused a malloc setting (mallopt): using its default");
  tensorkeep::agent::AgentServer server(options);
  auto bound = server.Bind();
  if (!bound.ok()) {
    tell('E');
    spdlog::error("{}", std::string(bound.status().message()));
    return 1;
  }
  if (*bound == tensorkeep::agent::AgentServer::Bound::kAlreadyRunning) {
    tell('A');
    std::cout << "already running on " << server.socket_path() << std::endl;
    return 0;
  }
  std::cout << "listening on " << server.socket_path() << std::endl;
  tell('L');
  std::thread([&server, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("signal {}: no new writers; exiting once the connected ones are done", sig);
    server.Stop();
  }).detach();
  server.Serve();
  return 0;
}
