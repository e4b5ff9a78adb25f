// HttpConnection: one accepted connection of the HTTP port, its socket
// (non-blocking), its TLS session (with TLS) and the bytes read from it that
// cpp-httplib has not consumed yet. ConnectionGate reads a request into it
// without a thread of its own; a worker then serves the request through
// ConnectionStream, which reads that buffer first.
//
// Thread safety: one thread at a time (the gate's, then a worker's, then the
// gate's again for the next request on a kept-alive connection).
#ifndef TENSORKEEP_SERVER_HTTP_HTTP_CONNECTION_H_
#define TENSORKEEP_SERVER_HTTP_HTTP_CONNECTION_H_

#include <openssl/ssl.h>

#include <chrono>
#include <functional>
#include <string>

#include "httplib.h"

namespace tensorkeep {

using HttpClock = std::chrono::steady_clock;

struct HttpConnection {
  ~HttpConnection();  // closes the socket and frees the TLS session

  int fd = -1;
  SSL* ssl = nullptr;  // with TLS
  bool handshake_done = false;
  std::string client_ip;  // as accepted (what per-address caps count)
  int client_port = 0;
  std::string in;                  // read from the client, not yet consumed
  size_t in_pos = 0;               // consumed prefix of `in`
  int requests = 0;                // served on this connection
  std::function<void()> on_close;  // run by the destructor (the gate's counts)
  // The current request must be read by then (set when its first byte
  // arrives): reads beyond it fail, whoever does them.
  HttpClock::time_point request_deadline = HttpClock::time_point::max();
  // The response must be written by then; none for event streams, whose
  // writes are bounded one by one (and by MAX_EVENT_STREAMS).
  HttpClock::time_point response_deadline = HttpClock::time_point::max();

  size_t buffered() const { return in.size() - in_pos; }
  // Reads what the socket has now (non-blocking) into `in`, at most `limit`
  // bytes buffered. Returns false at end of stream or on an error (with
  // TLS, also a failed handshake). `*again_write`: TLS wants the socket
  // writable before it can go on.
  bool ReadAvailable(size_t limit, bool* again_write);
};

// The peer's address of a connected socket; false if it has none.
bool PeerAddress(int fd, std::string* ip, int* port);

// httplib::Stream over an HttpConnection: reads `in` first, then the socket,
// each wait bounded by the timeouts and every read by request_deadline.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(HttpConnection* c, std::chrono::milliseconds read_timeout,
                   std::chrono::milliseconds write_timeout)
      : c_(c), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return c_->fd; }

 private:
  // Waits (poll) for `events` until the earlier of `timeout` and `deadline`.
  bool Wait(short events, std::chrono::milliseconds timeout, HttpClock::time_point deadline) const;

  HttpConnection* c_;
  const std::chrono::milliseconds read_timeout_, write_timeout_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_HTTP_HTTP_CONNECTION_H_
