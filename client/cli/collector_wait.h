// WaitForCollector: the batch commands (export-tensorboard, import-smdebug,
// export-smdebug) wait for the collector's connection before their first call,
// retrying connection attempts for up to `seconds`: a slow connection set-up
// (a loaded machine, a collector still starting) is not an error for a command
// that runs for minutes. The quick commands keep failing fast.
#ifndef TENSORKEEP_CLIENT_CLI_COLLECTOR_WAIT_H_
#define TENSORKEEP_CLIENT_CLI_COLLECTOR_WAIT_H_

#include "absl/status/status.h"
#include "client/connection.h"

namespace tensorkeep {
namespace cli {

inline constexpr double kBatchConnectSeconds = 30;

// Unavailable naming the address when no connection was made in time.
absl::Status WaitForCollector(const Connection& connection, double seconds = kBatchConnectSeconds);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_COLLECTOR_WAIT_H_
