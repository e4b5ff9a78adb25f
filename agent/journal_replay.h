// Journals left by an agent that ended (killed, crashed, or its writer gave
// up) before their entries were durable: the next agent to start on the same
// journal directory pushes them, in order, then deletes them.
#ifndef TENSORKEEP_AGENT_JOURNAL_REPLAY_H_
#define TENSORKEEP_AGENT_JOURNAL_REPLAY_H_

#include <string>
#include <vector>

#include "agent/journal.h"

namespace tensorkeep {
namespace agent {

// The journal files in `dir` (none when it does not exist).
std::vector<std::string> LeftoverJournals(const std::string& dir);

// Pushes what the journal at `path` holds to the collector its header names
// (credentials from this process's environment), closing the worker as the
// journal says (a journaled Close), else without end-of-training, and deletes
// the file once all of it is durable. A collector that cannot be reached
// within the writer's give-up time leaves the file for the next agent; one
// that refuses the data (an error that is the data's own doing) has the file
// renamed to PATH.failed, so it is not retried at every start. Logs what it did.
void ReplayJournal(const std::string& path, JournalSpace* space, double linger_seconds);

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_JOURNAL_REPLAY_H_
