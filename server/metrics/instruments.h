// Counter and BucketHistogram: the collector's own measurements, cheap enough for
// the hot path (relaxed atomics, no lock, no allocation), read by /metrics
// (server/metrics/prometheus_text.h).
//
// Thread safety: every method is thread-safe.
#ifndef TENSORKEEP_SERVER_METRICS_INSTRUMENTS_H_
#define TENSORKEEP_SERVER_METRICS_INSTRUMENTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace tensorkeep {

// A monotonically increasing count.
class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// Observations counted in buckets with fixed upper bounds (Prometheus'
// cumulative histogram is computed when read).
class BucketHistogram {
 public:
  // `bounds`: increasing upper bounds; +Inf is implied.
  explicit BucketHistogram(std::vector<double> bounds);

  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (= count)
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  // One per bound and one for +Inf: observations in (previous bound, bound].
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
};

// Bucket bounds in seconds for latencies from 100 µs to 10 s.
std::vector<double> LatencyBuckets();

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_METRICS_INSTRUMENTS_H_
