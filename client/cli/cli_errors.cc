#include "client/cli/cli_errors.h"

#include <iostream>

#include "base/errors.h"

namespace tensorkeep {
namespace cli {

int Fail(const absl::Status& status) {
  const Reason reason = GetReason(status);
  std::cerr << "tensorkeep: ";
  if (reason != Reason::kNone) std::cerr << ReasonName(reason) << ": ";
  std::cerr << status.message() << "\n";
  return 1;
}

int UsageError(const std::string& message) {
  std::cerr << "tensorkeep: " << message << "\n(run `tensorkeep --help` for usage)\n";
  return 2;
}

}  // namespace cli
}  // namespace tensorkeep
