// AgentServer: tensorkeep-agent's listening side — a Unix socket in a
// directory only its user can enter, one Session (and thread) per connected
// writer, the memory budget they share, and the exit once idle.
//
// One agent per socket path: the agent holds an exclusive lock on
// PATH.lock for its lifetime, so a second one started for the same path
// (two training processes starting it at once) finds it taken and leaves.
//
// Thread safety: Serve() runs on one thread; Stop() may be called from any
// thread (or a signal handler's thread).
#ifndef TENSORKEEP_AGENT_AGENT_SERVER_H_
#define TENSORKEEP_AGENT_AGENT_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent_budget.h"
#include "agent/journal.h"
#include "agent/session.h"

namespace tensorkeep {
namespace agent {

struct AgentOptions {
  std::string socket_path;  // empty: DefaultSocketPath()
  uint64_t memory_budget_bytes = uint64_t{2} << 30;
  size_t max_clients = 256;
  // Exit after this long without a client (0: never).
  double idle_exit_seconds = 300;
  // Records not followed by an EndStep, Flush or Close wait this long before
  // they are sent, so that a training step's tensors go as one message.
  double linger_seconds = 0.1;
  // Where writers that cannot push journal (agent/journal.h); empty:
  // $TENSORKEEP_AGENT_JOURNAL_DIR, else "journal" beside the socket.
  std::string journal_dir;
  // The disk all journals may use; past it records are dropped (logged).
  uint64_t journal_max_bytes = uint64_t{4} << 30;
  // A leftover journal's replay keeps the agent from exiting idle until it
  // has waited this long for its collector; it then waits on (as long as the
  // agent runs) without holding the agent, as an orphan does.
  double leftover_hold_seconds = 300;
  // A replay the collector refused for now (a limit of its own) is tried
  // again after this long, while the agent runs.
  double leftover_retry_seconds = 30;
};

// $TENSORKEEP_AGENT_SOCKET, else $XDG_RUNTIME_DIR/tensorkeep/agent-v2.sock, else
// /tmp/tensorkeep-UID/agent-v2.sock (the Python client's _agent.socket_path()).
std::string DefaultSocketPath();

class AgentServer {
 public:
  enum class Bound { kListening, kAlreadyRunning };
  explicit AgentServer(AgentOptions options);
  ~AgentServer();

  // Creates the directory (0700, refused when another user owns it or others
  // may enter it), takes the lock and listens. kAlreadyRunning when another
  // agent holds the lock for this path.
  absl::StatusOr<Bound> Bind();
  // Pushes the journals earlier agents left (one thread a writer, counted as
  // a writer for its first leftover_hold_seconds of waiting for a collector,
  // then as an orphan), then accepts clients until Stop() or the idle timeout
  // (no training process connected for idle_exit_seconds; orphans do not
  // count); returns once every session (and replay) ended.
  void Serve();
  void Stop() { stopping_.store(true); }
  const std::string& socket_path() const { return options_.socket_path; }
  const std::string& journal_dir() const { return options_.journal_dir; }

 private:
  void Accept();
  void Reap();
  // Replays one writer's leftover journals in order, each until it is pushed
  // or refused (then renamed .failed), or the agent stops.
  void ReplayLeftovers(const std::vector<std::string>& paths);
  // Runs `work` on a thread counted in sessions_.
  void Spawn(std::function<void(uint64_t id)> work);
  void SpawnLocked(std::function<void(uint64_t id)> work);  // requires mu_

  AgentOptions options_;
  AgentBudget budget_;
  JournalSpace journal_space_;
  JournalSettings journal_settings_;
  int listen_fd_ = -1;
  int lock_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> orphans_{0};  // sessions whose training process is gone
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::thread> sessions_;  // running
  std::map<uint64_t, std::thread> finished_;  // to join
};

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_AGENT_SERVER_H_
