// CollectorServer: a running tensorkeep collector — store, Collector, gRPC
// service and server — as tensorkeep-server and the tests start it. Beside
// the TensorKeep service it serves grpc.health.v1.Health (SERVING once
// started, NOT_SERVING from the start of Shutdown) and server reflection;
// with ServerOptions::http_listen, the HTTP port (server/http/http_server.h)
// whose /healthz follows the health service.
//
// Thread safety: Shutdown() may be called from any thread, once.
#ifndef TENSORKEEP_SERVER_COLLECTOR_SERVER_H_
#define TENSORKEEP_SERVER_COLLECTOR_SERVER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/access/server_security.h"
#include "server/collector.h"
#include "server/http/api_v1.h"
#include "server/http/http_server.h"
#include "server/metrics/grpc_request_metrics.h"
#include "server/starting_service.h"
#include "server/tensorkeep_service.h"
#include "storage/leveldb_tensor_store.h"

namespace tensorkeep {

struct ServerOptions {
  // HOST:PORT; port 0 picks a free port.
  std::string listen = "127.0.0.1:7077";
  LevelDbOptions store;
  CollectorOptions collector;
  // Largest gRPC message accepted or sent (tensors above it come in chunks).
  int max_message_bytes = 512 << 20;
  // Memory the gRPC transport may use for buffers (0: gRPC's default).
  size_t grpc_memory_bytes = 256u << 20;
  // TLS, tokens, and whether a non-loopback address may go without them.
  ServerSecurity security;
  // HOST:PORT of the HTTP port (/metrics, /healthz, the JSON API:
  // server/http/); empty: none. Port 0 picks a free port.
  std::string http_listen;
  // The HTTP port's limits (its `listen` and `security` are the above).
  HttpOptions http;
  // Tests only (tensorkeep-server reads TENSORKEEP_TEST_RECOVERY_DELAY_MS and
  // TENSORKEEP_TEST_DRAIN_DELAY_MS): wait this long with the ports open
  // before opening the data directory, and with health NOT_SERVING before
  // draining at shutdown, so that tests can watch both states.
  int test_recovery_delay_ms = 0;
  int test_drain_delay_ms = 0;
};

class CollectorServer {
 public:
  // Opens the store (failing if another server holds it), recovers the
  // index and starts serving.
  static absl::StatusOr<std::unique_ptr<CollectorServer>> Start(const ServerOptions& options);
  // Shuts down (if not yet) and closes the store.
  ~CollectorServer();

  // "HOST:PORT" with the real port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // The HTTP port's "HOST:PORT" with the real port; empty without one.
  std::string http_address() const { return http_ == nullptr ? "" : http_->address(); }
  // Calls by method and status code (/metrics).
  const GrpcRequestMetrics& grpc_metrics() const { return *grpc_metrics_; }
  Collector* collector() const { return collector_.get(); }

  // Reads the --auth-tokens file again (SIGHUP); on an error the tokens in
  // force stay. FailedPrecondition without --auth-tokens.
  absl::Status ReloadTokens();

  // Stops accepting calls, lets running ones finish for up to `grace_seconds`
  // (then cancels them), and waits for queued writes to be durable.
  void Shutdown(double grace_seconds = 5.0);

 private:
  CollectorServer() = default;

  // The /metrics page's text.
  std::string MetricsText() const;

  std::unique_ptr<AccessControl> access_;  // null without --auth-tokens
  std::unique_ptr<GrpcRequestMetrics> grpc_metrics_;
  std::unique_ptr<LevelDbTensorStore> store_;
  std::unique_ptr<Collector> collector_;
  std::unique_ptr<TensorKeepService> service_;
  // What gRPC serves: UNAVAILABLE until service_ exists (set before server_).
  std::unique_ptr<StartingService> starting_;
  int test_drain_delay_ms_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;  // null without http_listen
  std::unique_ptr<ApiV1> api_;        // its /api/v1/
  std::string address_;
  std::string data_dir_;
  // The health service's status, for /healthz.
  std::atomic<bool> serving_{false};
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_COLLECTOR_SERVER_H_
