// Journals left by an agent that ended (killed, crashed, or its writer gave
// up) before their entries were durable: the next agent to start on the same
// journal directory pushes them, in order, then deletes them.
#ifndef TENSORKEEP_AGENT_JOURNAL_REPLAY_H_
#define TENSORKEEP_AGENT_JOURNAL_REPLAY_H_

#include <atomic>
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

// Pushes what the journal at `path` holds to the collector its header names
// (credentials from this process's environment), closing the worker as the
// journal says (a journaled Close), else without end-of-training, and deletes
// the file once all of it is durable. A collector that cannot be reached
// within the writer's give-up time leaves the file for the next agent; one
// that refuses the data (an error that is the data's own doing) has the file
// renamed to PATH.failed, so it is not retried at every start. Logs what it did.
// False when the file was kept for the next agent (the writer's later
// journals then wait too).
//
// `stopping` (may be null): once set, the replay ends within about half a
// second, keeping the file, instead of waiting for a collector that is away
// (up to the writer's give-up time, 300 s): the agent stops at once. Records
// it pushed before are pushed again from the file by the next agent.
bool ReplayJournal(const std::string& path, JournalSpace* space, double linger_seconds,
                   const std::atomic<bool>* stopping = nullptr);

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_JOURNAL_REPLAY_H_
