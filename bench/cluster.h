// Issue 15's scale-out proof: many simulated writers over a cluster of
// collectors on loopback, against one collector in the same run.
//
// Each simulated writer is one Push stream of its own trial (one worker):
// Open, then per step one record of `value_bytes` and its EndStep, then a
// Close with end-of-training, with at most `window` messages unacknowledged.
// The streams are gRPC callback reactors over a few channels per collector,
// driven by gRPC's own threads: 1,000 writers are 1,000 streams, not 1,000
// threads. Every trial goes to its rendezvous owner (base/rendezvous.h).
//
// Two phases, each on fresh tensorkeep-server processes: one collector
// (the baseline), then `collectors` collectors started with --cluster and
// --advertise. Figures: aggregate MB/s of values acknowledged as durable
// (from the first Open to the last stream's end), the p50/p99 latency from
// sending a record message to its acknowledgement, and the balance: trials
// and bytes on the most and the least loaded collector (trials counted from
// each collector's own listing).
//
// Thread safety: RunClusterBench is called from one thread.
#ifndef TENSORKEEP_BENCH_CLUSTER_H_
#define TENSORKEEP_BENCH_CLUSTER_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/report.h"

namespace tensorkeep {
namespace bench {

struct ClusterBenchOptions {
  std::string server_binary;
  std::string data_dir;  // base of the collectors' directories (removed after)
  int collectors = 4;
  int writers = 1000;
  int steps = 16;
  size_t value_bytes = 64 << 10;
  int window = 4;               // unacknowledged messages per writer
  int channels_per_collector = 4;
  double timeout_seconds = 300;  // a phase that takes longer fails
};

// Result lines cluster/w<writers>/c<collectors> (MB/s against one collector),
// cluster/p99-ack (against one collector's) and cluster/balance.
absl::StatusOr<std::vector<Result>> RunClusterBench(const ClusterBenchOptions& options);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_CLUSTER_H_
