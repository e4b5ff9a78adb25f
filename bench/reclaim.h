// Issue 12's reclaimed-space proof: an in-process collector stores N trials
// of 64 KiB tensors, half of them are deleted, and the data directory's disk
// use is measured before writing, after writing, right after the deletions
// and once the space is reclaimed (the index range compacted, the value-log
// files rewritten or dropped). The figure is the bytes reclaimed, its
// baseline the deleted trials' share of what writing took; the target is
// >= 0.9x. Two layouts: trials written one after another (as jobs that
// follow each other: value files hold one trial each) and written at the same
// time (files hold all of them, so half of each file stays live: only files
// at most --vlog-gc-threshold live are rewritten).
//
// Thread safety: RunReclaim is called from one thread; it runs its own.
#ifndef TENSORKEEP_BENCH_RECLAIM_H_
#define TENSORKEEP_BENCH_RECLAIM_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/report.h"

namespace tensorkeep {
namespace bench {

struct ReclaimOptions {
  std::string data_dir;  // base of the collectors' directories (removed after)
  int trials = 8;
  uint64_t trial_bytes = 32 << 20;    // of values a trial
  size_t value_bytes = 64 << 10;
  uint64_t value_file_bytes = 16 << 20;  // the collector's --value-file-mb
};

// Result lines reclaim/sequential and reclaim/concurrent.
absl::StatusOr<std::vector<Result>> RunReclaim(const ReclaimOptions& options);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_RECLAIM_H_
