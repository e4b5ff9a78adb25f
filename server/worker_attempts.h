// Attempts of a worker: a job restarted by its launcher (torchrun
// --max_restarts) opens its workers again with a higher v1.Open.attempt.
//
// The new attempt may rewrite the steps the earlier one committed (a record it
// writes again replaces the earlier attempt's; records it does not write again
// stay), commits again from nothing (the steps complete so far stay complete),
// and is recorded in the worker's restarts. A writer of an older attempt is
// refused from then on, so that a process of the failed attempt that is still
// sending cannot mix its data into the new attempt's. The WriteSession checks
// what it can at Open; the Committer, which owns the workers' state, decides.
// docs/semantics.md, "Restarted jobs".
#ifndef TENSORKEEP_SERVER_WORKER_ATTEMPTS_H_
#define TENSORKEEP_SERVER_WORKER_ATTEMPTS_H_

#include <cstdint>
#include <string>

namespace tensorkeep {

// CONFLICT's message for a writer of `attempt` when the worker is at `current`.
std::string SupersededMessage(const std::string& trial, const std::string& worker, uint32_t attempt,
                              uint32_t current);

// CONFLICT's message for a new attempt of a trial that has ended.
std::string RestartAfterEndMessage(const std::string& trial, const std::string& worker,
                                   uint32_t attempt);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_WORKER_ATTEMPTS_H_
