// tensorkeep-server: the collector.
//
//   tensorkeep-server [--listen HOST:PORT] [--data-dir DIR] [--sync]
//                     [--tls-cert F --tls-key F [--tls-client-ca F]]
//                     [--auth-tokens F] [--insecure]
//                     [--retain-days N] [--vlog-gc-threshold F] [--value-file-mb N]
//                     [--value-lanes N]
//                     [--http-listen HOST:PORT]
//                     [--log-level trace|debug|info|warn|error]
//                     [--cluster HOST:PORT,... --advertise HOST:PORT]
//
// Prints exactly "listening on HOST:PORT" (the real port) as its first line on
// standard output, and with --http-listen "http listening on HOST:PORT" as
// its second, logs to standard error, reloads --auth-tokens on SIGHUP,
// and shuts down cleanly on SIGTERM or SIGINT (streams drained, database
// closed).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "base/collector_list.h"
#include "base/process_tuning.h"
#include "server/collector_server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kDefaultListen[] = "127.0.0.1:7077";
constexpr uint64_t kDefaultMinFreeDiskBytes = uint64_t{256} << 20;
// The disk reserve (storage/disk_reserve.h) that lets the collector start on a
// disk something else filled: more than the index's 64 MiB write buffer, which
// opening may write out as a table.
constexpr uint64_t kStartReserveBytes = uint64_t{80} << 20;

constexpr char kUsage[] =
    "usage: tensorkeep-server [--listen HOST:PORT] [--data-dir DIR] [--sync]\n"
    "                         [--value-cache-mb N] [--memory-budget-mb N]\n"
    "                         [--max-push-streams N] [--max-watchers N] [--max-trial-watchers N]\n"
    "                         [--min-free-disk-mb N] [--worker-timeout S]\n"
    "                         [--retain-days N] [--vlog-gc-threshold F] [--value-file-mb N]\n"
    "                         [--value-lanes N]\n"
    "                         [--http-listen HOST:PORT]\n"
    "                         [--log-level trace|debug|info|warn|error]\n"
    "                         [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
    "                         [--auth-tokens FILE] [--insecure]\n"
    "                         [--cluster HOST:PORT,... --advertise HOST:PORT]\n"
    "\n"
    "  --listen HOST:PORT  address to serve on (default 127.0.0.1:7077; port 0 picks a\n"
    "                      free port). The first line on stdout is `listening on HOST:PORT`.\n"
    "  --data-dir DIR      data directory: a LevelDB index and values/ (default\n"
    "                      ~/.tensorkeep/data)\n"
    "  --sync              fsync before acknowledging writes (survives power loss;\n"
    "                      without it acknowledged writes survive a crash of the server)\n"
    "  --value-cache-mb N  memory for large values kept after a reduction or histogram\n"
    "                      read them, so that the next reduction of the same tensor does\n"
    "                      not read it again (default 128, at most a quarter of the\n"
    "                      memory budget; 0 disables)\n"
    "  --memory-budget-mb N  memory clients can make the collector hold: records waiting\n"
    "                      for their chunks, batches queued for the disk, the value cache\n"
    "                      (default 1024). Writers are slowed when it is in use, and a\n"
    "                      tensor larger than half of it is refused\n"
    "  --max-push-streams N  writers (Push streams) accepted at once (default 4096)\n"
    "  --max-watchers N    waiting and watching calls (WaitForSteps, WatchSteps,\n"
    "                      WatchRuleStatuses) at once (default 10000) ...\n"
    "  --max-trial-watchers N  ... and of them on one trial (default 1000)\n"
    "  --min-free-disk-mb N  keep this much free on the data directory's disk: below it\n"
    "                      new data is refused (STORAGE_FULL; writers resend by themselves\n"
    "                      once space is back) and queries go on (default 256; 0: off)\n"
    "  --worker-timeout S  a worker whose stream ended without a close with\n"
    "                      end-of-training is LOST when it has not reconnected within S\n"
    "                      seconds: later steps complete without it (default 60; 0: only\n"
    "                      `tensorkeep worker-lost` declares workers lost)\n"
    "  --retain-days N     delete ended trials whose end is more than N days old (a\n"
    "                      sweep every N/10 days, at most hourly; fractions allowed;\n"
    "                      default: keep trials until `tensorkeep delete`)\n"
    "  --vlog-gc-threshold F  after a deletion, a value-log file is rewritten (its live\n"
    "                      values copied) and removed once its live bytes are at most F\n"
    "                      of its size (default 0.5; 0: only files with nothing live)\n"
    "  --value-file-mb N   close a value-log file for writing at N MiB (default 1024);\n"
    "                      smaller files give deleted trials' space back sooner\n"
    "  --value-lanes N     value-log files open for writing at once (default 16): up to N\n"
    "                      trials writing at the same time each fill files of their own,\n"
    "                      so deleting one removes its files without copying (1: all\n"
    "                      trials' values interleaved in one file)\n"
    "  --http-listen HOST:PORT  serve HTTP here too (default: off): the web UI at /\n"
    "                      (docs/web-ui.md), /metrics (Prometheus), /healthz and the JSON\n"
    "                      API /api/v1/ (docs/http-api.md), with the\n"
    "                      same TLS and tokens as gRPC; port 0 picks a free port, and the\n"
    "                      second line on stdout is `http listening on HOST:PORT`\n"
    "  --http-request-timeout S  a client must send a whole HTTP request within S seconds\n"
    "                      of connecting (or of its first byte on a kept-alive\n"
    "                      connection), or it is closed (default 10); slow clients hold\n"
    "                      no thread meanwhile\n"
    "  --http-max-connections N  HTTP connections open at once (default 512) ...\n"
    "  --http-max-connections-per-address N  ... and from one client address (default\n"
    "                      64); more are refused at once\n"
    "  --log-level L       log verbosity on stderr (default info)\n"
    "\n"
    "scaling out (docs/scaling-out.md):\n"
    "  --cluster LIST      the collectors of the cluster, HOST:PORT,HOST:PORT,... as\n"
    "                      clients reach them (their TENSORKEEP_SERVERS): a trial this\n"
    "                      collector does not hold is created only if it owns it\n"
    "                      (rendezvous hashing); others are refused with\n"
    "                      WRONG_COLLECTOR naming the owner\n"
    "  --advertise HOST:PORT  this collector's address in --cluster\n"
    "\n"
    "security (docs/shared-collector.md):\n"
    "  --tls-cert FILE     serve TLS with this PEM certificate (chain)\n"
    "  --tls-key FILE      and its PEM private key\n"
    "  --tls-client-ca FILE  mutual TLS: refuse clients without a certificate signed by\n"
    "                      this CA, at the handshake\n"
    "  --auth-tokens FILE  require bearer tokens: lines `sha256:<hex> ROLE NAME [PREFIX...]`\n"
    "                      from `tensorkeep token-new`; roles read < write < admin;\n"
    "                      reloaded on SIGHUP\n"
    "  --insecure          allow an address beyond loopback without TLS and tokens\n"
    "                      (refused otherwise)\n";

std::string DefaultDataDir() {
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : ".") + "/.tensorkeep/data";
}

int Usage(const std::string& error) {
  std::cerr << "tensorkeep-server: " << error << "\n\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  tensorkeep::ServerOptions options;
  options.listen = kDefaultListen;
  options.store.path = DefaultDataDir();
  options.store.min_free_bytes = kDefaultMinFreeDiskBytes;
  options.store.start_reserve_bytes = kStartReserveBytes;
  std::string level = "info";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--listen") {
      const char* v = value("--listen");
      if (v == nullptr) return Usage("--listen needs HOST:PORT");
      options.listen = v;
    } else if (arg == "--http-listen") {
      const char* v = value("--http-listen");
      if (v == nullptr || *v == '\0') return Usage("--http-listen needs HOST:PORT");
      options.http_listen = v;
    } else if (arg == "--http-request-timeout") {
      const char* v = value("--http-request-timeout");
      char* end = nullptr;
      const double seconds = v == nullptr ? -1 : std::strtod(v, &end);
      if (v == nullptr || *v == '\0' || *end != '\0' || !(seconds >= 0.1) || seconds > 3600) {
        return Usage("--http-request-timeout needs a number of seconds in [0.1, 3600]");
      }
      options.http.request_timeout_seconds = seconds;
    } else if (arg == "--http-max-connections" || arg == "--http-max-connections-per-address") {
      const char* v = value(arg.c_str());
      char* end = nullptr;
      const unsigned long long n = v == nullptr ? 0 : std::strtoull(v, &end, 10);
      if (v == nullptr || *v == '\0' || *end != '\0' || n < 1 || n > 100000) {
        return Usage(arg + " needs a number of connections in [1, 100000]");
      }
      (arg == "--http-max-connections" ? options.http.max_connections
                                       : options.http.max_connections_per_address) = n;
    } else if (arg == "--data-dir") {
      const char* v = value("--data-dir");
      if (v == nullptr) return Usage("--data-dir needs a directory");
      options.store.path = v;
    } else if (arg == "--sync") {
      options.collector.sync = true;
    } else if (arg == "--value-cache-mb") {
      const char* v = value("--value-cache-mb");
      char* end = nullptr;
      const unsigned long long mb = v == nullptr ? 0 : std::strtoull(v, &end, 10);
      if (v == nullptr || *v == '\0' || *end != '\0' || mb > (1ull << 20)) {
        return Usage("--value-cache-mb needs a number of MiB (0 to disable)");
      }
      options.collector.value_cache_bytes = static_cast<size_t>(mb) << 20;
    } else if (arg == "--min-free-disk-mb") {
      const char* v = value("--min-free-disk-mb");
      char* end = nullptr;
      const unsigned long long mb = v == nullptr ? 0 : std::strtoull(v, &end, 10);
      if (v == nullptr || *v == '\0' || *end != '\0' || mb > (1ull << 30)) {
        return Usage("--min-free-disk-mb needs a number of MiB (0 to turn the guard off)");
      }
      options.store.min_free_bytes = static_cast<uint64_t>(mb) << 20;
    } else if (arg == "--memory-budget-mb" || arg == "--max-push-streams" ||
               arg == "--max-watchers" || arg == "--max-trial-watchers") {
      const char* v = value(arg.c_str());
      char* end = nullptr;
      const unsigned long long n = v == nullptr ? 0 : std::strtoull(v, &end, 10);
      if (v == nullptr || *v == '\0' || *end != '\0' || n == 0 || n > (1ull << 30)) {
        return Usage(arg + " needs a positive number");
      }
      if (arg == "--memory-budget-mb") {
        options.collector.memory_budget_bytes = static_cast<size_t>(n) << 20;
      } else if (arg == "--max-push-streams") {
        options.collector.max_push_streams = static_cast<size_t>(n);
      } else if (arg == "--max-watchers") {
        options.collector.max_watchers = static_cast<size_t>(n);
      } else {
        options.collector.max_trial_watchers = static_cast<size_t>(n);
      }
    } else if (arg == "--worker-timeout") {
      const char* v = value("--worker-timeout");
      char* end = nullptr;
      const double seconds = v == nullptr ? -1 : std::strtod(v, &end);
      if (v == nullptr || *v == '\0' || *end != '\0' || !(seconds >= 0) || seconds > 1e9) {
        return Usage("--worker-timeout needs a number of seconds (0 to disable)");
      }
      options.collector.worker_timeout_seconds = seconds;
    } else if (arg == "--retain-days" || arg == "--vlog-gc-threshold") {
      const char* v = value(arg.c_str());
      char* end = nullptr;
      const double x = v == nullptr ? -1 : std::strtod(v, &end);
      if (arg == "--retain-days") {
        if (v == nullptr || *v == '\0' || *end != '\0' || !(x > 0) || x > 1e6) {
          return Usage("--retain-days needs a number of days > 0 (fractions allowed)");
        }
        options.collector.retain_days = x;
      } else {
        if (v == nullptr || *v == '\0' || *end != '\0' || !(x >= 0) || x >= 1) {
          return Usage("--vlog-gc-threshold needs a fraction in [0, 1)");
        }
        options.store.value_gc_live_fraction = x;
      }
    } else if (arg == "--value-file-mb") {
      const char* v = value("--value-file-mb");
      char* end = nullptr;
      const unsigned long long mb = v == nullptr ? 0 : std::strtoull(v, &end, 10);
      if (v == nullptr || *v == '\0' || *v == '-' || *end != '\0' || mb == 0 || mb > (1u << 20)) {
        return Usage("--value-file-mb needs a number of MiB >= 1");
      }
      options.store.value_file_bytes = static_cast<uint64_t>(mb) << 20;
    } else if (arg == "--value-lanes") {
      const char* v = value("--value-lanes");
      char* end = nullptr;
      const unsigned long long n = v == nullptr ? 0 : std::strtoull(v, &end, 10);
      if (v == nullptr || *v == '\0' || *v == '-' || *end != '\0' || n == 0 || n > 256) {
        return Usage("--value-lanes needs a number of files from 1 to 256");
      }
      options.store.value_lanes = static_cast<size_t>(n);
    } else if (arg == "--test-abort-at") {
      // Tests only (not in the usage): the process aborts, as if killed, at
      // a stage of a deletion or a value-log rewrite ("delete.batch",
      // "delete.compacted", "gc.copied", "gc.indexed", "gc.dropping").
      const char* v = value("--test-abort-at");
      if (v == nullptr || *v == '\0') return Usage("--test-abort-at needs a stage");
      const std::string stage = v;
      auto abort_at = [stage](std::string_view at) -> absl::Status {
        if (at == stage) {
          spdlog::warn("--test-abort-at {}: aborting", stage);
          spdlog::default_logger()->flush();
          std::abort();
        }
        return absl::OkStatus();
      };
      options.collector.fault_point = abort_at;
      options.store.fault_point = abort_at;
    } else if (arg == "--tls-cert" || arg == "--tls-key" || arg == "--tls-client-ca" ||
               arg == "--auth-tokens") {
      const char* v = value(arg.c_str());
      if (v == nullptr || *v == '\0') return Usage(arg + " needs a file");
      if (arg == "--tls-cert") {
        options.security.tls_cert = v;
      } else if (arg == "--tls-key") {
        options.security.tls_key = v;
      } else if (arg == "--tls-client-ca") {
        options.security.tls_client_ca = v;
      } else {
        options.security.auth_tokens = v;
      }
    } else if (arg == "--cluster") {
      const char* v = value("--cluster");
      if (v == nullptr) return Usage("--cluster needs HOST:PORT,HOST:PORT,...");
      auto list = tensorkeep::ParseCollectorList(v, "--cluster");
      if (!list.ok()) return Usage(std::string(list.status().message()));
      options.collector.cluster = std::move(*list);
    } else if (arg == "--advertise") {
      const char* v = value("--advertise");
      if (v == nullptr || !tensorkeep::IsHostPort(v)) {
        return Usage("--advertise needs this collector's HOST:PORT as listed in --cluster");
      }
      options.collector.advertise = v;
    } else if (arg == "--insecure") {
      options.security.insecure = true;
    } else if (arg == "--log-level") {
      const char* v = value("--log-level");
      if (v == nullptr) return Usage("--log-level needs a level");
      level = v;
    } else {
      return Usage("unknown argument '" + arg + "'");
    }
  }

  const auto& cluster = options.collector.cluster;
  if (cluster.empty() != options.collector.advertise.empty()) {
    return Usage(
        "--cluster and --advertise go together: the cluster's collectors, and this "
        "one's address among them");
  }
  if (!cluster.empty() &&
      std::find(cluster.begin(), cluster.end(), options.collector.advertise) == cluster.end()) {
    return Usage("--advertise " + options.collector.advertise +
                 " is not in --cluster: list this collector under the address clients use");
  }

  auto logger = spdlog::stderr_color_mt("tensorkeep");
  spdlog::set_default_logger(logger);
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return Usage("unknown --log-level '" + level + "'");
  }
  spdlog::set_level(parsed);

  tensorkeep::TuneProcessForLargeBuffers();
  // A client that closes a TLS connection while the HTTP server writes to it
  // must cost an EPIPE, not the process.
  signal(SIGPIPE, SIG_IGN);

  // Block the shutdown signals in every thread; the main thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Tests only: see ServerOptions::test_recovery_delay_ms.
  for (auto [name, field] : {std::pair<const char*, int*>{"TENSORKEEP_TEST_RECOVERY_DELAY_MS",
                                                          &options.test_recovery_delay_ms},
                             {"TENSORKEEP_TEST_DRAIN_DELAY_MS", &options.test_drain_delay_ms}}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      *field = std::clamp(std::atoi(v), 0, 60 * 1000);
    }
  }
  auto server = tensorkeep::CollectorServer::Start(options);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  std::printf("listening on %s\n", (*server)->address().c_str());
  if (!(*server)->http_address().empty()) {
    std::printf("http listening on %s\n", (*server)->http_address().c_str());
  }
  std::fflush(stdout);
  spdlog::info("tensorkeep-server serving on {} with data in {}{}{}{}", (*server)->address(),
               options.store.path, options.collector.sync ? " (sync)" : "",
               options.security.tls()
                   ? (options.security.tls_client_ca.empty() ? ", TLS" : ", mutual TLS")
                   : ", plaintext",
               options.security.auth_tokens.empty() ? "" : ", tokens required");
  if (!cluster.empty()) {
    spdlog::info("member {} of a cluster of {} collectors: creates only the trials it owns",
                 options.collector.advertise, cluster.size());
  }

  int sig = 0;
  for (;;) {
    sigwait(&signals, &sig);
    if (sig != SIGHUP) break;
    const absl::Status reloaded = (*server)->ReloadTokens();
    if (reloaded.ok()) {
      spdlog::info("SIGHUP: reloaded {}", options.security.auth_tokens);
    } else {
      spdlog::error("SIGHUP: tokens not reloaded, the previous ones stay: {}",
                    std::string(reloaded.message()));
    }
  }
  spdlog::info("received {}, draining streams and closing the database",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown(5.0);
  server->reset();
  spdlog::info("stopped cleanly");
  return 0;
}
