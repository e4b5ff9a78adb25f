// How the CLI's commands report failures: a status on stderr with its
// tensorkeep reason (exit 1), or a usage error (exit 2).
#ifndef TENSORKEEP_CLIENT_CLI_CLI_ERRORS_H_
#define TENSORKEEP_CLIENT_CLI_CLI_ERRORS_H_

#include <string>

#include "absl/status/status.h"

namespace tensorkeep {
namespace cli {

int Fail(const absl::Status& status);
int UsageError(const std::string& message);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_CLI_ERRORS_H_
