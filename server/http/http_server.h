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
// it: connections wait for a whole request in a ConnectionGate (one thread,
// epoll; server/http/connection_gate.h) with a deadline for the whole
// request and caps on open connections, in all and per client address; only
// then does one of a fixed pool of workers serve it. Slow clients (slowloris)
// and idle ones thus hold no worker: /healthz and /metrics keep answering.
// Request bodies and headers are capped, each read and write has a timeout
// and a whole response a deadline (event streams: MAX_EVENT_STREAMS, fewer
// than the workers), kept-alive connections have an idle timeout and a cap
// on requests, and handlers' work is bounded (proto/limits.proto).
//
// Start-up: the port may open before the collector is ready (it recovers its
// index): under SetReady(false) only routes registered `while_starting` (/healthz)
// are served, every other path answers 503 saying the collector is starting.
//
// Thread safety: Get() from any thread, before or after Start(); Start() and
// Stop() once each, from one thread; handlers run on the pool's threads.
#ifndef TENSORKEEP_SERVER_HTTP_HTTP_SERVER_H_
#define TENSORKEEP_SERVER_HTTP_HTTP_SERVER_H_

#include <openssl/ssl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <regex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/tokens.h"
#include "httplib.h"
#include "server/access/access_control.h"
#include "server/access/server_security.h"

namespace tensorkeep {

struct HttpOptions {
  std::string listen;                       // HOST:PORT; port 0 picks a free port
  ServerSecurity security;                  // TLS files and --insecure (tokens: `access`)
  size_t threads = 16;                      // requests served at once (> MAX_EVENT_STREAMS)
  size_t max_connections = 512;             // --http-max-connections
  size_t max_connections_per_address = 64;  // --http-max-connections-per-address
  size_t max_body_bytes = 64 << 10;
  double request_timeout_seconds = 10;   // --http-request-timeout: a whole request
  double keep_alive_seconds = 5;         // idle between two requests
  double timeout_seconds = 10;           // each wait to read or write
  double response_timeout_seconds = 60;  // a whole response (not event streams)
  int keep_alive_max_requests = 100;
};

// What HttpServer needs of its cpp-httplib server (http_server.cc).
class GatedServing {
 public:
  virtual ~GatedServing() = default;
  virtual absl::Status StartServing(const HttpOptions& options, SSL_CTX* tls) = 0;
  virtual void StopServing() = 0;
  virtual size_t open_connections() const = 0;
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

  // Serves GET `pattern` (a regex on the path) to callers with `role`; before
  // SetReady(true) only if `while_starting`.
  void Get(const std::string& pattern, Role role, Handler handler, bool while_starting = false);
  // Whether the collector is ready (the default): when not, only routes
  // registered `while_starting` are served.
  void SetReady(bool ready);

  // Binds and starts serving on a thread of its own.
  absl::Status Start();
  // "HOST:PORT" with the real port (after Start).
  const std::string& address() const { return address_; }
  // Stops accepting, waits for the handlers to return.
  void Stop();
  // True once Stop began: long handlers (event streams) end.
  bool stopping() const { return stopping_.load(); }
  // Connections open now (waiting for a request or being served).
  size_t open_connections() const;

 private:
  struct Route {
    std::regex pattern;
    Role role;
    Handler handler;
    bool while_starting;
  };
  HttpServer() = default;
  void Dispatch(const httplib::Request& req, httplib::Response& res);

  HttpOptions options_;
  const AccessControl* access_ = nullptr;
  std::unique_ptr<httplib::Server> server_;
  GatedServing* gated_ = nullptr;  // server_ itself
  SSL_CTX* tls_ = nullptr;         // server_'s, with TLS
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ready_{true};
  std::shared_mutex routes_mu_;
  std::vector<Route> routes_;  // in order: the first match serves
  std::atomic<bool> listen_returned_{false};
  bool started_ = false;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_HTTP_HTTP_SERVER_H_
