#include "server/worker_attempts.h"

#include "absl/strings/str_cat.h"

namespace tensorkeep {

std::string SupersededMessage(const std::string& trial, const std::string& worker, uint32_t attempt,
                              uint32_t current) {
  return absl::StrCat("worker '", worker, "' of trial '", trial, "' is at attempt ", current,
                      " (its job was restarted); this writer belongs to attempt ", attempt,
                      ", which the restart superseded: it may write nothing more");
}

std::string RestartAfterEndMessage(const std::string& trial, const std::string& worker,
                                   uint32_t attempt) {
  return absl::StrCat("trial '", trial,
                      "' has ended (every worker closed or was LOST) before attempt ", attempt,
                      " of worker '", worker,
                      "' came back: a restarted job must reopen its workers within the collector's "
                      "--worker-timeout of the failure; give this run a new trial name");
}

}  // namespace tensorkeep
