#include "bench/delay_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensorkeep {
namespace bench {

namespace {

using Clock = std::chrono::steady_clock;

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Writes all of `data`; false once the peer is gone.
bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

// One direction of one connection: bytes read from `from`, held for the
// delay, written to `to`.
struct Direction {
  int from = -1, to = -1;
  Clock::duration delay{};
  std::mutex mu;
  std::condition_variable ready;
  std::deque<std::pair<Clock::time_point, std::string>> held;  // guarded by mu
  bool eof = false;                                            // guarded by mu
  std::thread reader, writer;

  void Read() {
    std::string buf(256 << 10, '\0');
    for (;;) {
      const ssize_t r = recv(from, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      std::lock_guard<std::mutex> lock(mu);
      if (r <= 0) {
        eof = true;
        ready.notify_all();
        return;
      }
      held.emplace_back(Clock::now() + delay, buf.substr(0, static_cast<size_t>(r)));
      ready.notify_all();
    }
  }
  void Write() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      ready.wait(lock, [&] { return eof || !held.empty(); });
      if (held.empty()) break;  // eof and nothing left
      const Clock::time_point due = held.front().first;
      if (Clock::now() < due) {
        ready.wait_until(lock, due);
        continue;
      }
      std::string data = std::move(held.front().second);
      held.pop_front();
      lock.unlock();
      const bool ok = WriteAll(to, data.data(), data.size());
      lock.lock();
      if (!ok) break;
    }
    shutdown(to, SHUT_WR);
  }
};

struct DelayProxy::Pipe {
  int client = -1, server = -1;
  Direction up, down;
  ~Pipe() {
    shutdown(client, SHUT_RDWR);
    shutdown(server, SHUT_RDWR);
    for (Direction* d : {&up, &down}) {
      {
        std::lock_guard<std::mutex> lock(d->mu);
        d->eof = true;
        d->held.clear();
        d->ready.notify_all();
      }
      if (d->reader.joinable()) d->reader.join();
      if (d->writer.joinable()) d->writer.join();
    }
    close(client);
    close(server);
  }
};

absl::StatusOr<std::unique_ptr<DelayProxy>> DelayProxy::Start(const std::string& upstream,
                                                              double one_way_seconds) {
  std::unique_ptr<DelayProxy> p(new DelayProxy());
  const size_t colon = upstream.rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(upstream.substr(colon + 1), &p->upstream_port_)) {
    return absl::InvalidArgumentError(absl::StrCat("upstream '", upstream, "' is not HOST:PORT"));
  }
  p->delay_ = one_way_seconds;
  p->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (p->listen_fd_ < 0 || bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(p->listen_fd_, 16) != 0 ||
      getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(absl::StrCat("delay proxy: cannot listen: ", strerror(errno)));
  }
  p->address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  p->acceptor_ = std::thread([raw = p.get()] { raw->Accept(); });
  return p;
}

void DelayProxy::Accept() {
  for (;;) {
    const int client = accept(listen_fd_, nullptr, nullptr);
    if (stopping_.load()) {
      if (client >= 0) close(client);
      return;
    }
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (server < 0 || connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(client);
      if (server >= 0) close(server);
      continue;
    }
    NoDelay(client);
    NoDelay(server);
    auto pipe = std::make_unique<Pipe>();
    pipe->client = client;
    pipe->server = server;
    const auto delay = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(delay_));
    for (auto [d, from, to] : {std::tuple<Direction*, int, int>{&pipe->up, client, server},
                               std::tuple<Direction*, int, int>{&pipe->down, server, client}}) {
      d->from = from;
      d->to = to;
      d->delay = delay;
      d->reader = std::thread([d = d] { d->Read(); });
      d->writer = std::thread([d = d] { d->Write(); });
    }
    std::lock_guard<std::mutex> lock(mu_);
    pipes_.push_back(std::move(pipe));
  }
}

DelayProxy::~DelayProxy() {
  stopping_.store(true);
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  std::lock_guard<std::mutex> lock(mu_);
  pipes_.clear();
}

}  // namespace bench
}  // namespace tensorkeep
