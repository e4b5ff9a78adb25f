// ConnectionGate: where the HTTP port's connections wait, without a thread,
// until a whole request has arrived.
//
// cpp-httplib gives each connection a thread from the moment it is accepted,
// so a few clients that send their headers a byte at a time (slowloris), or
// connect and send nothing, would hold every thread of the pool and /healthz
// and /metrics would stop answering. Here one thread (epoll) reads every
// waiting connection without blocking: the TLS handshake, the request line,
// the headers and the body (Content-Length). Only a complete request is
// handed to a worker (`ready`), which serves it from the buffer; a kept-alive
// connection comes back (Return) to wait for its next request.
//
// Bounds (HttpOptions, docs/shared-collector.md "Slow and idle clients"):
//  * a request (from its first byte, or from the connection's accept for the
//    first one, TLS handshake included) must arrive whole within
//    request_timeout, or the connection is closed;
//  * a kept-alive connection may wait keep_alive_timeout for its next one;
//  * at most max_connections open connections, and max_per_address from one
//    client address: beyond them new connections are closed at once (plain
//    HTTP first gets a 503 saying why);
//  * a request's headers and body are at most max_header_bytes and
//    max_body_bytes (431 and 413); a body must have a Content-Length (411).
//
// Thread safety: Admit and Return from any thread; the rest from the owner.
#ifndef TENSORKEEP_SERVER_HTTP_CONNECTION_GATE_H_
#define TENSORKEEP_SERVER_HTTP_CONNECTION_GATE_H_

#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/http/http_connection.h"

namespace tensorkeep {

struct GateOptions {
  size_t max_connections = 512;
  size_t max_per_address = 64;
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds keep_alive_timeout{5000};
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 64 << 10;
};

class ConnectionGate {
 public:
  using Ready = std::function<void(std::unique_ptr<HttpConnection>)>;

  // `tls` (not owned; null for plain HTTP) makes each connection's session.
  ConnectionGate(const GateOptions& options, SSL_CTX* tls, Ready ready);
  ~ConnectionGate();  // Stop()

  absl::Status Start();
  // Takes an accepted socket: waits for its first request, or closes it at
  // once beyond the connection caps.
  void Admit(int fd);
  // A worker is done with a request and the connection stays open.
  void Return(std::unique_ptr<HttpConnection> c);
  // Closes every waiting connection; later ones are closed as they come.
  void Stop();

  // Open connections (waiting here or served by a worker).
  size_t open_connections() const;

 private:
  struct Waiting {
    std::unique_ptr<HttpConnection> c;
    HttpClock::time_point deadline;
    bool started = false;  // a request began (its deadline runs)
  };

  void Loop();
  void Take(std::unique_ptr<HttpConnection> c, bool first_request);
  // Reads what `w` has; hands it over or closes it when it can.
  void Progress(HttpConnection* key);
  // Whether `w` holds a whole request; or an answer to send before closing.
  bool Complete(const HttpConnection& c, std::string* refusal) const;
  void SetDeadline(Waiting* w, HttpClock::time_point deadline);
  void Drop(HttpConnection* key);
  void Wake();

  const GateOptions options_;
  SSL_CTX* const tls_;
  const Ready ready_;
  int epoll_ = -1;
  int wake_ = -1;  // eventfd
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;  // guards what follows it
  std::vector<std::pair<std::unique_ptr<HttpConnection>, bool>> incoming_;
  size_t open_ = 0;
  std::unordered_map<std::string, size_t> per_address_;

  // The gate's thread only.
  std::unordered_map<HttpConnection*, Waiting> waiting_;
  std::set<std::pair<HttpClock::time_point, HttpConnection*>> deadlines_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_HTTP_CONNECTION_GATE_H_
