// Issue 11's regex proof: 4 writers push to a real tensorkeep-server while
// hostile clients send catastrophic patterns (`(a+)+$` against names planted
// to make backtracking explode, and long nested patterns) to ListTensorNames
// in a loop. The writers' throughput with the hostile clients is compared to
// their throughput without, in alternating rounds of the same run; the target
// is within 2x (before RE2, such a query froze every trial's writes for
// minutes, and a 40 kB nested pattern crashed the server).
//
// Thread safety: RunHostileRegex is called from one thread; it runs its own.
#ifndef TENSORKEEP_BENCH_HOSTILE_REGEX_H_
#define TENSORKEEP_BENCH_HOSTILE_REGEX_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/report.h"

namespace tensorkeep {
namespace bench {

struct HostileRegexOptions {
  std::string server_binary;  // tensorkeep-server to start
  std::string data_dir;       // its --data-dir (removed after)
  double round_seconds = 3;   // each round's writing time
  int rounds = 2;             // of each kind (quiet, hostile), alternating
  int writers = 4;
  int hostile_clients = 2;
  size_t value_bytes = 64 << 10;
};

// Result lines hostile-regex/quiet (the baseline) and hostile-regex/hostile,
// the latter judged against ">= 0.5x quiet"; the hostile clients' calls and
// the refusals of patterns RE2 cannot run are in its extra figures.
absl::StatusOr<std::vector<Result>> RunHostileRegex(const HostileRegexOptions& options);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_HOSTILE_REGEX_H_
