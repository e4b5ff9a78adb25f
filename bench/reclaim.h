// Issue 12's reclaimed-space proof: an in-process collector stores N trials
// of 64 KiB tensors, half of them are deleted, and the data directory's disk
// use is measured before writing, after writing, right after the deletions
// and once the space is reclaimed (the index range compacted, the value-log
// files rewritten or dropped). The figure is the bytes reclaimed, its
// baseline the deleted trials' share of what writing took; the target is
// >= 0.9x. Two layouts: trials written one after another (as jobs that
// follow each other) and written at the same time. With value-log lanes (the
// default, --value-lanes 16) each trial fills files of its own either way,
// and a deleted trial's files are dropped without copying; with one lane the
// concurrent layout's files hold every trial, so half of each stays live and
// only files at most --vlog-gc-threshold live are rewritten. Besides the
// figure: the write throughput, and the bytes the process wrote while
// reclaiming (/proc/self/io wchar: copies and compactions) against the
// deleted share, its write amplification.
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
  size_t value_lanes = 0;                 // the collector's --value-lanes; 0: its default
  double gc_threshold = -1;               // the collector's --vlog-gc-threshold; < 0: default
  bool sync = false;                      // the collector's --sync
};

// Result lines reclaim/sequential and reclaim/concurrent.
absl::StatusOr<std::vector<Result>> RunReclaim(const ReclaimOptions& options);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_RECLAIM_H_
