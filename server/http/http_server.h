// HttpServer: the collector's HTTP port (--http-listen HOST:PORT): /metrics,
// /healthz and the JSON API (docs/http-api.md), on cpp-httplib (Debian's
// libcpp-httplib-dev).
//
// Same security as the gRPC port:
//  * TLS with the gRPC port's --tls-cert/--tls-key (and --tls-client-ca:
//    clients without a certificate signed by it fail the handshake);
//  * with --auth-tokens every route but /healthz needs `Authorization:
//    Bearer TOKEN` with the route's role (401 without or with an unknown
//    token, 403 with too small a role); trial prefixes are checked by the
//    handlers through the CallAccess they get;
//  * an address beyond loopback needs TLS and tokens unless --insecure
//    (server/access/server_security.h, CheckExposure).
// Bounded, so that an untrusted client cannot exhaust the collector through
// it: a fixed pool of threads (connections beyond them wait in a short queue,
// then in the kernel's backlog), request bodies and headers capped, read and
// write timeouts, a cap on requests per kept-alive connection, and handlers
// whose work is bounded (the API's limits, proto/limits.proto).
//
// Thread safety: Get() before Start(); Start() and Stop() once each, from one
// thread; handlers run on the pool's threads.
#ifndef TENSORKEEP_SERVER_HTTP_HTTP_SERVER_H_
#define TENSORKEEP_SERVER_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/tokens.h"
#include "httplib.h"
#include "server/access/access_control.h"
#include "server/access/server_security.h"

namespace tensorkeep {

struct HttpOptions {
  std::string listen;       // HOST:PORT; port 0 picks a free port
  ServerSecurity security;  // TLS files and --insecure (tokens: `access`)
  size_t threads = 16;      // requests served at once
  size_t max_queued = 64;   // accepted connections waiting for a thread
  size_t max_body_bytes = 64 << 10;
  int timeout_seconds = 10;  // each read and write of a connection
  int keep_alive_max_requests = 100;
};

class HttpServer {
 public:
  using Handler =
      std::function<void(const httplib::Request&, const CallAccess&, httplib::Response&)>;

  // Checks the options (CheckExposure, TLS files); serves nothing yet.
  // `access` (null: no tokens) is not owned and must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(const HttpOptions& options,
                                                            const AccessControl* access);
  ~HttpServer();

  // Serves GET `pattern` (a regex on the path) to callers with `role`.
  void Get(const std::string& pattern, Role role, Handler handler);

  // Binds and starts serving on a thread of its own.
  absl::Status Start();
  // "HOST:PORT" with the real port (after Start).
  const std::string& address() const { return address_; }
  // Stops accepting, waits for the handlers to return.
  void Stop();
  // True once Stop began: long handlers (event streams) end.
  bool stopping() const { return stopping_.load(); }

 private:
  HttpServer() = default;

  HttpOptions options_;
  const AccessControl* access_ = nullptr;
  std::unique_ptr<httplib::Server> server_;
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> listen_returned_{false};
  bool started_ = false;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_HTTP_HTTP_SERVER_H_
