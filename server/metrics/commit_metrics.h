// CommitMetrics: what the committer (server/committer.h) made durable, for
// /metrics: bytes and records ingested, and how long writes waited from
// Submit until durable.
#ifndef TENSORKEEP_SERVER_METRICS_COMMIT_METRICS_H_
#define TENSORKEEP_SERVER_METRICS_COMMIT_METRICS_H_

#include "server/metrics/instruments.h"

namespace tensorkeep {

struct CommitMetrics {
  Counter bytes;    // bytes of record batches written (values and their metadata)
  Counter records;  // tensor records written
  Counter writes;   // writes made durable
  Counter failed;   // writes refused or failed
  // Seconds from Submit until the write was durable and applied.
  BucketHistogram latency{LatencyBuckets()};
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_METRICS_COMMIT_METRICS_H_
