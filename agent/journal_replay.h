// Journals left by an agent that ended (killed, crashed, or stopped during an
// outage) before their entries were durable: the next agent to start on the
// same journal directory pushes them, in order, then deletes them, waiting for
// their collector while it runs.
#ifndef TENSORKEEP_AGENT_JOURNAL_REPLAY_H_
#define TENSORKEEP_AGENT_JOURNAL_REPLAY_H_

#include <atomic>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "agent/journal.h"

namespace tensorkeep {
namespace agent {

// The journal files in `dir` (none when it does not exist), sorted by name:
// the journals of one writer sort in the order they were made
// (TRIAL.WORKER.PID-SESSION-N.tkj, numbers zero-padded; what a stopping
// agent's writer held in memory goes to ...-N-a.tkj, before journal N).
std::vector<std::string> LeftoverJournals(const std::string& dir);

// Which writer a journal file belongs to, from its name (TRIAL.WORKER): one
// writer's journals are replayed one after another, never at once (two
// streams of one worker).
std::string JournalWriterKey(const std::string& path);

// How a replay waits for its collector.
struct ReplayOptions {
  double linger_seconds = 0.1;  // the writer's (AgentOptions::linger_seconds)
  // Once set, the replay ends within about half a second, keeping the file,
  // instead of waiting for a collector that is away: the agent stops at once.
  // Records it pushed before are pushed again from the file by the next agent.
  const std::atomic<bool>* stopping = nullptr;
  // The replay's writer never gives up reconnecting while the agent runs.
  // Once one wait for the collector has lasted this long, `on_released` is
  // called (once): from then on the replay goes on waiting without keeping
  // the agent from exiting idle (agent/agent_server.h).
  double hold_seconds = std::numeric_limits<double>::infinity();
  std::function<void()> on_released;
};

// Pushes what the journal at `path` holds to the collector its header names
// (credentials from this process's environment), closing the worker as the
// journal says (a journaled Close), else without end-of-training, and deletes
// the file once all of it is durable. It waits for a collector that is away
// for as long as the agent runs. A collector that refuses the data (an error
// that is the data's own doing) has the file renamed to PATH.failed, so it is
// not retried. Logs what it did.
// False when the file was kept: the agent stops, or the collector refused it
// for now (a limit: worth trying again later). The writer's later journals
// then wait too.
bool ReplayJournal(const std::string& path, JournalSpace* space, const ReplayOptions& options);

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_JOURNAL_REPLAY_H_
