// CollectorServer: a running tensorkeep collector — store, Collector, gRPC
// service and server — as tensorkeep-server and the tests start it. Beside
// the TensorKeep service it serves grpc.health.v1.Health (SERVING once
// started, NOT_SERVING from the start of Shutdown) and server reflection.
//
// Thread safety: Shutdown() may be called from any thread, once.
#ifndef TENSORKEEP_SERVER_COLLECTOR_SERVER_H_
#define TENSORKEEP_SERVER_COLLECTOR_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/access/server_security.h"
#include "server/collector.h"
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
  Collector* collector() const { return collector_.get(); }

  // Reads the --auth-tokens file again (SIGHUP); on an error the tokens in
  // force stay. FailedPrecondition without --auth-tokens.
  absl::Status ReloadTokens();

  // Stops accepting calls, lets running ones finish for up to `grace_seconds`
  // (then cancels them), and waits for queued writes to be durable.
  void Shutdown(double grace_seconds = 5.0);

 private:
  CollectorServer() = default;

  std::unique_ptr<AccessControl> access_;  // null without --auth-tokens
  std::unique_ptr<LevelDbTensorStore> store_;
  std::unique_ptr<Collector> collector_;
  std::unique_ptr<TensorKeepService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_COLLECTOR_SERVER_H_
