// The collector's /metrics page: what it ingested, what it holds, the
// latency of its commits, its disk and memory, and its gRPC calls, in
// Prometheus' text format (docs/shared-collector.md, "Monitoring", lists
// every metric).
#ifndef TENSORKEEP_SERVER_METRICS_COLLECTOR_METRICS_H_
#define TENSORKEEP_SERVER_METRICS_COLLECTOR_METRICS_H_

#include <string>

#include "server/collector.h"
#include "server/metrics/grpc_request_metrics.h"

namespace tensorkeep {

struct CollectorMetricsSources {
  Collector* collector = nullptr;
  const GrpcRequestMetrics* grpc = nullptr;
  std::string data_dir;  // for the free space of its filesystem
  int open_streams = 0;  // live Push streams
  bool serving = false;  // the health service's status
};

// The page's text (content type kPrometheusContentType). Reads counters and
// gauges, the store's value-log space (TensorStore::Space) and statvfs's free
// space: cheap enough for a scrape every few seconds.
std::string CollectorMetricsText(const CollectorMetricsSources& sources);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_METRICS_COLLECTOR_METRICS_H_
