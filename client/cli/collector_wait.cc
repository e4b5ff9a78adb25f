#include "client/cli/collector_wait.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace tensorkeep {
namespace cli {

absl::Status WaitForCollector(const Connection& connection, double seconds) {
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(seconds));
  if (connection.channel()->WaitForConnected(deadline)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cannot reach the collector at ", connection.address(),
                                             " within ", seconds, " s"));
}

}  // namespace cli
}  // namespace tensorkeep
