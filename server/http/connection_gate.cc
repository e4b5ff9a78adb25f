#include "server/http/connection_gate.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/http/http_errors.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace {

// A whole response for a connection the gate closes: JSON like every error
// of the API (server/http/http_errors.h).
std::string Refusal(int code, const char* reason_phrase, const absl::Status& status) {
  httplib::Response res;
  SendError(res, status);
  return absl::StrCat("HTTP/1.1 ", code, " ", reason_phrase,
                      "\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      "Content-Length: ",
                      res.body.size(), "\r\n\r\n", res.body);
}

// Best effort, never blocking: the connection is closed right after.
void SendRefusal(HttpConnection* c, const std::string& text) {
  if (c->ssl != nullptr) {
    if (c->handshake_done) SSL_write(c->ssl, text.data(), static_cast<int>(text.size()));
  } else {
    (void)send(c->fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

}  // namespace

ConnectionGate::ConnectionGate(const GateOptions& options, SSL_CTX* tls, Ready ready)
    : options_(options), tls_(tls), ready_(std::move(ready)) {}

ConnectionGate::~ConnectionGate() {
  Stop();
  if (epoll_ >= 0) close(epoll_);
  if (wake_ >= 0) close(wake_);
}

absl::Status ConnectionGate::Start() {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_ < 0 || wake_ < 0) {
    return absl::InternalError(
        absl::StrCat("HTTP port: cannot create its epoll/eventfd: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up
  epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void ConnectionGate::Stop() {
  if (stop_.exchange(true)) return;
  Wake();
  if (thread_.joinable()) thread_.join();
  std::vector<std::pair<std::unique_ptr<HttpConnection>, bool>> incoming;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(incoming_);
  }
  incoming.clear();
  deadlines_.clear();
  waiting_.clear();  // closes them
}

size_t ConnectionGate::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

void ConnectionGate::Wake() {
  if (wake_ < 0) return;
  const uint64_t one = 1;
  (void)!write(wake_, &one, sizeof(one));
}

void ConnectionGate::Admit(int fd) {
  auto c = std::make_unique<HttpConnection>();
  c->fd = fd;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (!PeerAddress(fd, &c->client_ip, &c->client_port)) return;  // gone already
  std::string refusal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t& mine = per_address_[c->client_ip];
    if (stop_.load()) {
      refusal = "";
    } else if (open_ >= options_.max_connections) {
      refusal = Refusal(503, "Service Unavailable",
                        absl::UnavailableError(
                            absl::StrCat("the collector's HTTP port has ", open_,
                                         " connections open, its maximum (--http-max-connections): "
                                         "try again later")));
    } else if (mine >= options_.max_per_address) {
      refusal = Refusal(503, "Service Unavailable",
                        absl::UnavailableError(absl::StrCat(
                            "your address ", c->client_ip, " has ", mine,
                            " connections open to the collector's HTTP port, its maximum "
                            "(--http-max-connections-per-address): close some")));
    } else {
      ++mine;
      ++open_;
      const std::string ip = c->client_ip;
      c->on_close = [this, ip] {
        std::lock_guard<std::mutex> lock(mu_);
        --open_;
        auto it = per_address_.find(ip);
        if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
      };
    }
    if (!c->on_close && mine == 0) per_address_.erase(c->client_ip);
  }
  if (!c->on_close) {
    if (tls_ == nullptr && !refusal.empty()) SendRefusal(c.get(), refusal);
    spdlog::debug("HTTP: refused a connection from {}", c->client_ip);
    return;  // closes it
  }
  if (tls_ != nullptr) {
    c->ssl = SSL_new(tls_);
    if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) return;
  }
  // The first request's clock starts now: a client that connects and sends
  // nothing is closed after request_timeout.
  c->request_deadline = HttpClock::now() + options_.request_timeout;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.emplace_back(std::move(c), true);
  }
  Wake();
}

void ConnectionGate::Return(std::unique_ptr<HttpConnection> c) {
  if (stop_.load()) return;
  c->request_deadline = HttpClock::time_point::max();
  c->response_deadline = HttpClock::time_point::max();
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.emplace_back(std::move(c), false);
  }
  Wake();
}

void ConnectionGate::SetDeadline(Waiting* w, HttpClock::time_point deadline) {
  deadlines_.erase({w->deadline, w->c.get()});
  w->deadline = deadline;
  deadlines_.insert({deadline, w->c.get()});
}

void ConnectionGate::Drop(HttpConnection* key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  deadlines_.erase({it->second.deadline, key});
  epoll_ctl(epoll_, EPOLL_CTL_DEL, key->fd, nullptr);
  waiting_.erase(it);
}

void ConnectionGate::Take(std::unique_ptr<HttpConnection> c, bool first_request) {
  HttpConnection* key = c.get();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = key;
  if (epoll_ctl(epoll_, EPOLL_CTL_ADD, key->fd, &ev) != 0) return;  // closes it
  Waiting& w = waiting_[key];
  w.c = std::move(c);
  w.started = first_request;
  w.deadline =
      first_request ? key->request_deadline : HttpClock::now() + options_.keep_alive_timeout;
  deadlines_.insert({w.deadline, key});
  Progress(key);  // bytes already buffered (pipelined, or inside TLS)
}

bool ConnectionGate::Complete(const HttpConnection& c, std::string* refusal) const {
  const char* begin = c.in.data() + c.in_pos;
  const size_t size = c.buffered();
  const char* end = std::search(begin, begin + size, "\r\n\r\n", "\r\n\r\n" + 4);
  if (end == begin + size) {
    if (size >= options_.max_header_bytes) {
      *refusal = Refusal(431, "Request Header Fields Too Large",
                         absl::InvalidArgumentError(absl::StrCat(
                             "request headers longer than ", options_.max_header_bytes, " bytes")));
    }
    return false;
  }
  const size_t header_bytes = end + 4 - begin;
  if (header_bytes > options_.max_header_bytes) {
    *refusal = Refusal(431, "Request Header Fields Too Large",
                       absl::InvalidArgumentError(absl::StrCat(
                           "request headers longer than ", options_.max_header_bytes, " bytes")));
    return false;
  }
  size_t body = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(begin, end - begin), "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
      *refusal = Refusal(411, "Length Required",
                         absl::InvalidArgumentError(
                             "a request body needs a Content-Length (no Transfer-Encoding)"));
      return false;
    }
    if (absl::EqualsIgnoreCase(name, "content-length")) {
      uint64_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        *refusal = Refusal(400, "Bad Request",
                           absl::InvalidArgumentError("Content-Length is not a number"));
        return false;
      }
      if (n > options_.max_body_bytes) {
        *refusal =
            Refusal(413, "Payload Too Large",
                    absl::ResourceExhaustedError(absl::StrCat(
                        "request body of ", n, " bytes, more than ", options_.max_body_bytes)));
        return false;
      }
      body = n;
    }
  }
  return size >= header_bytes + body;
}

void ConnectionGate::Progress(HttpConnection* key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  Waiting& w = it->second;
  bool again_write = false;
  if (!w.c->ReadAvailable(options_.max_header_bytes + options_.max_body_bytes + 1, &again_write)) {
    Drop(key);
    return;
  }
  epoll_event ev{};
  ev.events = again_write ? EPOLLOUT : EPOLLIN;
  ev.data.ptr = key;
  epoll_ctl(epoll_, EPOLL_CTL_MOD, key->fd, &ev);
  if (w.c->buffered() == 0) return;
  if (!w.started) {  // a kept-alive connection's next request begins
    w.started = true;
    w.c->request_deadline = HttpClock::now() + options_.request_timeout;
    SetDeadline(&w, w.c->request_deadline);
  }
  std::string refusal;
  if (Complete(*w.c, &refusal)) {
    std::unique_ptr<HttpConnection> c = std::move(w.c);
    deadlines_.erase({w.deadline, key});
    epoll_ctl(epoll_, EPOLL_CTL_DEL, key->fd, nullptr);
    waiting_.erase(it);
    ready_(std::move(c));
  } else if (!refusal.empty()) {
    SendRefusal(w.c.get(), refusal);
    Drop(key);
  }
}

void ConnectionGate::Loop() {
  std::vector<epoll_event> events(64);
  while (!stop_.load()) {
    int timeout_ms = -1;
    if (!deadlines_.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadlines_.begin()->first - HttpClock::now())
                            .count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left + 1, 0, 60 * 1000));
    }
    const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("HTTP port: epoll_wait failed: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t count;
        (void)!read(wake_, &count, sizeof(count));
        std::vector<std::pair<std::unique_ptr<HttpConnection>, bool>> incoming;
        {
          std::lock_guard<std::mutex> lock(mu_);
          incoming.swap(incoming_);
        }
        for (auto& [c, first] : incoming) Take(std::move(c), first);
      } else {
        Progress(static_cast<HttpConnection*>(events[i].data.ptr));
      }
    }
    // Close whoever ran out of time (partial requests and idle keep-alives).
    const auto now = HttpClock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      HttpConnection* key = deadlines_.begin()->second;
      auto it = waiting_.find(key);
      if (it != waiting_.end() && it->second.started) {
        spdlog::debug("HTTP: closed a connection from {}: no whole request within {} ms",
                      key->client_ip, options_.request_timeout.count());
      }
      if (it != waiting_.end()) {
        Drop(key);
      } else {
        deadlines_.erase(deadlines_.begin());
      }
    }
  }
}

}  // namespace tensorkeep
