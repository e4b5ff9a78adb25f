#include "server/metrics/collector_metrics.h"

#include <sys/statvfs.h>

#include <system_error>

#include "server/metrics/prometheus_text.h"
#include "storage/leveldb_tensor_store.h"

namespace tensorkeep {
namespace {

void Gauge(PrometheusText* out, const char* name, const char* help, double value) {
  out->Family(name, "gauge", help);
  out->Sample(name, value);
}

void CounterFamily(PrometheusText* out, const char* name, const char* help, uint64_t value) {
  out->Family(name, "counter", help);
  out->Sample(name, static_cast<double>(value));
}

}  // namespace

std::string CollectorMetricsText(const CollectorMetricsSources& s) {
  PrometheusText out;
  Collector* c = s.collector;
  const CommitMetrics& commits = c->commit_metrics();
  CounterFamily(&out, "tensorkeep_ingested_bytes_total",
                "Bytes of tensor records made durable (values and their metadata)",
                commits.bytes.value());
  CounterFamily(&out, "tensorkeep_ingested_records_total", "Tensor records made durable",
                commits.records.value());
  CounterFamily(&out, "tensorkeep_commit_writes_total",
                "Writes (record batches and metadata changes) made durable",
                commits.writes.value());
  CounterFamily(&out, "tensorkeep_commit_failures_total",
                "Writes refused by the committer or failed in the store", commits.failed.value());
  out.HistogramFamily("tensorkeep_commit_latency_seconds",
                      "Time from a write's arrival at the committer until it was durable",
                      commits.latency.Read());
  Gauge(&out, "tensorkeep_open_push_streams", "Writers (Push streams) connected now",
        s.open_streams);
  Gauge(&out, "tensorkeep_queued_bytes", "Bytes of writes waiting for the committer",
        static_cast<double>(c->queued_bytes()));
  size_t trials = 0, running = 0;
  for (const auto& t : c->Trials()) {
    ++trials;
    if (!t->ended()) ++running;
  }
  Gauge(&out, "tensorkeep_trials", "Trials the collector holds", trials);
  Gauge(&out, "tensorkeep_trials_running", "Trials not yet ended", running);
  const TensorStore::SpaceStats space = c->store()->Space();
  Gauge(&out, "tensorkeep_value_log_files", "Files of the value log (large tensor values)",
        static_cast<double>(space.value_files));
  Gauge(&out, "tensorkeep_value_log_bytes", "Bytes of the value log's files",
        static_cast<double>(space.value_bytes));
  Gauge(&out, "tensorkeep_value_log_garbage_bytes",
        "Bytes of the value log no longer referenced (deleted trials' values, until reclaimed)",
        static_cast<double>(space.value_garbage_bytes));
  struct statvfs st;
  if (statvfs(s.data_dir.c_str(), &st) == 0) {
    Gauge(&out, "tensorkeep_disk_free_bytes",
          "Free bytes (for unprivileged users) of the data directory's filesystem",
          static_cast<double>(st.f_bavail) * st.f_frsize);
  }
  Gauge(&out, "tensorkeep_memory_budget_used_bytes",
        "Memory held of --memory-budget-mb (records in transit, queued batches, caches)",
        static_cast<double>(c->memory()->used()));
  Gauge(&out, "tensorkeep_memory_budget_limit_bytes", "--memory-budget-mb in bytes",
        static_cast<double>(c->memory()->limit()));
  Gauge(&out, "tensorkeep_watchers", "Waiting and watching calls (and event streams) now",
        static_cast<double>(c->notifier()->watchers()));
  Gauge(&out, "tensorkeep_serving", "1 while the collector serves, 0 while starting or draining",
        s.serving ? 1 : 0);
  if (s.grpc != nullptr) s.grpc->Write(&out);
  return out.text();
}

}  // namespace tensorkeep
