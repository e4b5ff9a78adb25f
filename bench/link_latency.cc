#include "bench/link_latency.h"

#include <csignal>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/delay_proxy.h"
#include "bench/subprocess.h"
#include "client/writer.h"

namespace tensorkeep {
namespace bench {

namespace {

// MB/s of one writer pushing `total` bytes in values of `value_bytes` to
// `address` (trial `trial`).
absl::StatusOr<double> Push(const std::string& address, const std::string& trial,
                            size_t value_bytes, size_t total) {
  client::WriterOptions o;
  o.server = address;
  o.trial = trial;
  o.retry_timeout_seconds = 60;
  TK_ASSIGN_OR_RETURN(auto writer, client::Writer::Open(o, 30));
  const size_t n = value_bytes / sizeof(float);
  std::string data(n * sizeof(float), '\0');
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(i % 1000) * 0.001f;
    std::memcpy(&data[i * sizeof(float)], &v, sizeof(v));
  }
  const size_t steps = std::max<size_t>(1, total / value_bytes);
  const auto start = std::chrono::steady_clock::now();
  for (size_t s = 0; s < steps; ++s) {
    v1::TensorRecord r;
    r.set_name("w");
    r.set_step(s);
    r.set_mode(v1::TRAIN);
    r.set_mode_step(s);
    r.set_dtype(v1::FLOAT32);
    r.add_shape(static_cast<int64_t>(n));
    r.set_has_value(true);
    r.set_data(data);
    TK_RETURN_IF_ERROR(writer->Write(std::move(r)));
    TK_RETURN_IF_ERROR(writer->EndStep(s));
  }
  TK_RETURN_IF_ERROR(writer->Flush());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TK_RETURN_IF_ERROR(writer->Close(true));
  return static_cast<double>(steps * value_bytes) / 1e6 / seconds;
}

std::string SizeText(size_t bytes) {
  return bytes >= (1u << 20) ? absl::StrCat(bytes >> 20, "MiB") : absl::StrCat(bytes >> 10, "KiB");
}

}  // namespace

absl::StatusOr<std::vector<Result>> RunLinkLatencyBench(const LinkLatencyOptions& o) {
  TK_ASSIGN_OR_RETURN(ServerProcess server, SpawnServer(o.server_binary, o.data_dir));
  std::vector<Result> results;
  int run = 0;
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (size_t value_bytes : o.value_bytes) {
    // Rounds alternate the configurations, so that a slow spell of the
    // machine hits them alike; medians.
    std::vector<double> loopback;
    std::vector<std::vector<double>> through(o.rtt_ms.size());
    for (int round = 0; round < o.rounds; ++round) {
      TK_ASSIGN_OR_RETURN(const double direct,
                          Push(server.address, absl::StrCat("rtt-", run++), value_bytes,
                               o.total_bytes));
      loopback.push_back(direct);
      for (size_t i = 0; i < o.rtt_ms.size(); ++i) {
        TK_ASSIGN_OR_RETURN(auto proxy, DelayProxy::Start(server.address, o.rtt_ms[i] / 2000));
        TK_ASSIGN_OR_RETURN(const double mbps, Push(proxy->address(), absl::StrCat("rtt-", run++),
                                                    value_bytes, o.total_bytes));
        through[i].push_back(mbps);
      }
    }
    const double base = median(loopback);
    const double proxy_only = o.rtt_ms.front() == 0 ? median(through.front()) : NAN;
    for (size_t i = 0; i < o.rtt_ms.size(); ++i) {
      const double rtt = o.rtt_ms[i];
      const double mbps = median(through[i]);
      Result r;
      r.name = absl::StrCat("rtt/", SizeText(value_bytes), "/", absl::StrFormat("%g", rtt), "ms");
      r.value = mbps;
      r.unit = "MB/s";
      r.figure_text = absl::StrFormat("%.1f MB/s", mbps);
      if (rtt > 0 && !std::isnan(proxy_only)) {
        absl::StrAppendFormat(&r.figure_text, " (%.2fx the 0 ms proxy)", mbps / proxy_only);
      }
      r.baseline_name = "loopback";
      r.baseline = base;
      r.baseline_text = absl::StrFormat("%.1f MB/s", base);
      if (rtt == o.target_rtt_ms) {
        r.target = absl::StrFormat(">= %.2fx loopback", o.target_ratio);
        r.Judge(mbps >= o.target_ratio * base);
      }
      r.extra = {{"MBps", mbps}, {"loopback_MBps", base}, {"rtt_ms", rtt},
                 {"value_bytes", static_cast<double>(value_bytes)},
                 {"rounds", static_cast<double>(o.rounds)}};
      if (!std::isnan(proxy_only)) r.extra["proxy_0ms_MBps"] = proxy_only;
      results.push_back(std::move(r));
    }
  }
  server.process->Signal(SIGTERM);
  server.process->Wait(30);
  return results;
}

}  // namespace bench
}  // namespace tensorkeep
