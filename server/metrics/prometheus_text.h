// PrometheusText: writes metrics in Prometheus' text exposition format,
// version 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/):
// each family's `# HELP` and `# TYPE` lines, then its samples.
//
// Thread safety: none (one per scrape).
#ifndef TENSORKEEP_SERVER_METRICS_PROMETHEUS_TEXT_H_
#define TENSORKEEP_SERVER_METRICS_PROMETHEUS_TEXT_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/metrics/instruments.h"

namespace tensorkeep {

// The Content-Type of the format.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family: `type` is counter, gauge or histogram.
  void Family(const std::string& name, const std::string& type, const std::string& help);
  // One sample of the current family (`suffix` for histograms' _bucket etc.).
  void Sample(const std::string& name, const Labels& labels, double value);
  void Sample(const std::string& name, double value) { Sample(name, {}, value); }
  // A whole histogram family with one series.
  void HistogramFamily(const std::string& name, const std::string& help,
                       const BucketHistogram::Snapshot& snapshot);

  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_METRICS_PROMETHEUS_TEXT_H_
