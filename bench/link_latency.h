// Issue 13 point 4: one writer's push throughput across a link with latency,
// against the same writer on loopback in the same run.
//
// A fresh tensorkeep-server; one client::Writer pushes `total_bytes` of
// float32 values of `value_bytes` each (one a step, with EndStep, then a
// Flush), once straight to the collector (the baseline), then through a
// DelayProxy (bench/delay_proxy.h) for each round trip time. The figure is
// MB/s of values acknowledged as durable, from the first Write to the Flush's
// return (medians of alternating rounds); the target: at 20 ms RTT, at least
// half the loopback figure. The proxy itself costs CPU (it copies every byte
// on the same 2 cores): the 0 ms proxy's figure shows that cost, and each
// delayed figure is also given against it.
//
// Thread safety: RunLinkLatencyBench is called from one thread.
#ifndef TENSORKEEP_BENCH_LINK_LATENCY_H_
#define TENSORKEEP_BENCH_LINK_LATENCY_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/report.h"

namespace tensorkeep {
namespace bench {

struct LinkLatencyOptions {
  std::string server_binary;
  std::string data_dir;
  std::vector<double> rtt_ms = {0, 2, 20};  // through the proxy (0: its own cost)
  std::vector<size_t> value_bytes = {4u << 20, 256u << 10};
  size_t total_bytes = 256u << 20;  // a run's values
  int rounds = 3;                   // alternating; medians
  double target_rtt_ms = 20;        // judged: >= target_ratio x loopback
  double target_ratio = 0.5;
};

// Result lines rtt/<value>/<rtt>ms (MB/s against loopback).
absl::StatusOr<std::vector<Result>> RunLinkLatencyBench(const LinkLatencyOptions& options);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_LINK_LATENCY_H_
