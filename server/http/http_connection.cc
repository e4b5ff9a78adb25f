#include "server/http/http_connection.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace tensorkeep {
namespace {

void AddressOf(const sockaddr_storage& addr, std::string* ip, int* port) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    *port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    *port = ntohs(a->sin6_port);
  }
  *ip = text;
}

}  // namespace

HttpConnection::~HttpConnection() {
  if (on_close) on_close();
  if (ssl != nullptr) {
    // A close_notify if the socket takes it now; never wait for the peer's.
    if (handshake_done) SSL_shutdown(ssl);
    SSL_free(ssl);
  }
  if (fd >= 0) {
    shutdown(fd, SHUT_RDWR);
    close(fd);
  }
}

bool HttpConnection::ReadAvailable(size_t limit, bool* again_write) {
  *again_write = false;
  if (in_pos > 0 && in_pos == in.size()) {
    in.clear();
    in_pos = 0;
  }
  char buf[4096];
  for (;;) {
    if (ssl != nullptr && !handshake_done) {
      ERR_clear_error();
      const int r = SSL_accept(ssl);
      if (r == 1) {
        handshake_done = true;
        continue;
      }
      const int err = SSL_get_error(ssl, r);
      if (err == SSL_ERROR_WANT_READ) return true;
      if (err == SSL_ERROR_WANT_WRITE) {
        *again_write = true;
        return true;
      }
      return false;  // not TLS, or the certificate was refused
    }
    if (buffered() >= limit) return true;
    const size_t want = std::min(sizeof(buf), limit - buffered());
    if (ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_read(ssl, buf, static_cast<int>(want));
      if (n > 0) {
        in.append(buf, n);
        continue;
      }
      const int err = SSL_get_error(ssl, n);
      if (err == SSL_ERROR_WANT_READ) return true;
      if (err == SSL_ERROR_WANT_WRITE) {
        *again_write = true;
        return true;
      }
      return false;
    }
    const ssize_t n = recv(fd, buf, want, 0);
    if (n > 0) {
      in.append(buf, n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

bool ConnectionStream::Wait(short events, std::chrono::milliseconds timeout,
                            HttpClock::time_point deadline) const {
  const auto until = std::min(deadline, HttpClock::now() + timeout);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - HttpClock::now()).count();
    if (left <= 0) return false;
    pollfd p{c_->fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
    if (r > 0) return true;  // ready, or an error the next call reports
    if (r < 0 && errno != EINTR) return false;
  }
}

bool ConnectionStream::is_readable() const {
  if (c_->buffered() > 0) return true;
  if (c_->ssl != nullptr && SSL_pending(c_->ssl) > 0) return true;
  return Wait(POLLIN, read_timeout_, c_->request_deadline);
}

bool ConnectionStream::is_writable() const {
  return Wait(POLLOUT, write_timeout_, c_->response_deadline);
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  if (c_->buffered() > 0) {
    const size_t n = std::min(size, c_->buffered());
    std::memcpy(ptr, c_->in.data() + c_->in_pos, n);
    c_->in_pos += n;
    if (c_->in_pos == c_->in.size()) {
      c_->in.clear();
      c_->in_pos = 0;
    }
    return static_cast<ssize_t>(n);
  }
  const int want = static_cast<int>(std::min<size_t>(size, INT_MAX));
  for (;;) {
    if (HttpClock::now() >= c_->request_deadline) return -1;
    short wait_for = POLLIN;
    if (c_->ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_read(c_->ssl, ptr, want);
      if (n > 0) return n;
      const int err = SSL_get_error(c_->ssl, n);
      if (err == SSL_ERROR_ZERO_RETURN) return 0;
      if (err == SSL_ERROR_WANT_WRITE) {
        wait_for = POLLOUT;
      } else if (err != SSL_ERROR_WANT_READ) {
        return -1;
      }
    } else {
      const ssize_t n = recv(c_->fd, ptr, want, 0);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
    if (!Wait(wait_for, read_timeout_, c_->request_deadline)) return -1;
  }
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (size == 0) return 0;
  const int want = static_cast<int>(std::min<size_t>(size, INT_MAX));
  for (;;) {
    if (HttpClock::now() >= c_->response_deadline) return -1;
    short wait_for = POLLOUT;
    if (c_->ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_write(c_->ssl, ptr, want);
      if (n > 0) return n;
      const int err = SSL_get_error(c_->ssl, n);
      if (err == SSL_ERROR_WANT_READ) {
        wait_for = POLLIN;
      } else if (err != SSL_ERROR_WANT_WRITE) {
        return -1;
      }
    } else {
      const ssize_t n = send(c_->fd, ptr, want, MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
    if (!Wait(wait_for, write_timeout_, c_->response_deadline)) return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = c_->client_ip;
  port = c_->client_port;
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ip.clear();
  port = 0;
  if (getsockname(c_->fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    AddressOf(addr, &ip, &port);
  }
}

bool PeerAddress(int fd, std::string* ip, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  AddressOf(addr, ip, port);
  return !ip->empty();
}

}  // namespace tensorkeep
