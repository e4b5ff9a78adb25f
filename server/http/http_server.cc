#include "server/http/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <regex>
#include <shared_mutex>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/loopback.h"
#include "base/status_macros.h"
#include "proto/limits.pb.h"
#include "server/http/connection_gate.h"
#include "server/http/http_connection.h"
#include "server/http/http_errors.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace {

// The workers: serve whole requests the gate hands over. Their queue needs
// no bound of its own: it never holds more than the gate's open connections.
class WorkerPool {
 public:
  explicit WorkerPool(size_t threads) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~WorkerPool() { Shutdown(); }
  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return;
      jobs_.push_back(std::move(fn));
    }
    ready_.notify_one();
  }
  // Runs what is queued, then joins.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return !jobs_.empty() || shutdown_; });
        if (jobs_.empty()) return;  // shutting down, nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
};

// httplib's accepting loop hands each accepted socket to its task queue;
// this one runs the task at once, on the accepting thread: the task is
// GatedServer::process_and_close_socket, which only gives the socket to the
// gate (it never blocks).
class AdmitAtOnce : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// The connection a worker serves (for HttpServer::Get's handlers).
thread_local HttpConnection* serving = nullptr;

// An event stream (a chunked response) has no deadline for its whole
// response: each write still has one, and MAX_EVENT_STREAMS bounds them.
void NoteStreaming(const httplib::Response& res) {
  if (serving != nullptr && res.content_provider_ && res.is_chunked_content_provider_) {
    serving->response_deadline = HttpClock::time_point::max();
  }
}

// cpp-httplib's Server (or SSLServer) whose connections go through a
// ConnectionGate and then a WorkerPool, instead of a thread each from accept
// on. Requests are parsed and answered by httplib's own process_request.
template <class Base>
class GatedServer : public Base, public GatedServing {
 public:
  template <class... Args>
  explicit GatedServer(Args&&... args) : Base(std::forward<Args>(args)...) {}
  ~GatedServer() override { StopServing(); }

  absl::Status StartServing(const HttpOptions& options, SSL_CTX* tls) override {
    options_ = options;
    // httplib listens with a backlog of 5: a burst of clients beyond it would
    // wait for SYN retransmissions (seconds). Accepting costs little here (the
    // gate takes connections without a thread), so let the kernel queue more.
    if (::listen(this->svr_sock_, SOMAXCONN) != 0) {
      return absl::InternalError(
          absl::StrCat("HTTP port: cannot set its listen backlog: ", std::strerror(errno)));
    }
    pool_ = std::make_unique<WorkerPool>(options.threads);
    GateOptions gate;
    gate.max_connections = options.max_connections;
    gate.max_per_address = options.max_connections_per_address;
    gate.request_timeout = Millis(options.request_timeout_seconds);
    gate.keep_alive_timeout = Millis(options.keep_alive_seconds);
    gate.max_body_bytes = options.max_body_bytes;
    gate_ = std::make_unique<ConnectionGate>(gate, tls, [this](std::unique_ptr<HttpConnection> c) {
      auto* raw = c.release();
      pool_->Post([this, raw] { Serve(std::unique_ptr<HttpConnection>(raw)); });
    });
    return gate_->Start();
  }
  // After httplib's loop returned: closes what waits, ends the workers.
  size_t open_connections() const override {
    return gate_ == nullptr ? 0 : gate_->open_connections();
  }
  void StopServing() override {
    stopping_.store(true);
    if (gate_ != nullptr) gate_->Stop();
    if (pool_ != nullptr) pool_->Shutdown();  // a job it drops closes its connection
  }

 private:
  static std::chrono::milliseconds Millis(double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }

  bool process_and_close_socket(socket_t sock) override {
    if (gate_ == nullptr || stopping_.load()) {
      close(sock);
      return false;
    }
    gate_->Admit(sock);
    return true;
  }

  // One request (whole in the buffer); then the connection waits in the gate
  // for the next one, if it stays open.
  void Serve(std::unique_ptr<HttpConnection> c) {
    if (stopping_.load()) return;  // closes it
    c->response_deadline = HttpClock::now() + Millis(options_.response_timeout_seconds);
    ConnectionStream stream(c.get(), Millis(options_.timeout_seconds),
                            Millis(options_.timeout_seconds));
    const bool last = c->requests + 1 >= options_.keep_alive_max_requests || stopping_.load();
    bool closed = false;
    serving = c.get();
    SSL* ssl = c->ssl;
    const bool ok = this->process_request(stream, last, closed,
                                          [ssl](httplib::Request& req) { req.ssl = ssl; });
    serving = nullptr;
    ++c->requests;
    if (!ok || closed || last || stopping_.load()) return;  // closes it
    gate_->Return(std::move(c));
  }

  HttpOptions options_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<ConnectionGate> gate_;
  std::atomic<bool> stopping_{false};
};

absl::Status Readable(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", flag, " '", path, "'"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const HttpOptions& options,
                                                               const AccessControl* access) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->options_ = options;
  s->access_ = access;
  const size_t colon = options.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen '", options.listen, "' is not HOST:PORT"));
  }
  TK_RETURN_IF_ERROR(CheckExposure(options.security, options.listen, access != nullptr));
  const ServerSecurity& sec = options.security;
  if (sec.tls()) {
    TK_RETURN_IF_ERROR(Readable(sec.tls_cert, "--tls-cert"));
    TK_RETURN_IF_ERROR(Readable(sec.tls_key, "--tls-key"));
    if (!sec.tls_client_ca.empty()) {
      TK_RETURN_IF_ERROR(Readable(sec.tls_client_ca, "--tls-client-ca"));
    }
    auto ssl = std::make_unique<GatedServer<httplib::SSLServer>>(
        sec.tls_cert.c_str(), sec.tls_key.c_str(),
        sec.tls_client_ca.empty() ? nullptr : sec.tls_client_ca.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--http-listen: cannot serve TLS with --tls-cert '", sec.tls_cert, "' and --tls-key '",
          sec.tls_key, "' (not a matching PEM certificate and key?)"));
    }
    s->tls_ = ssl->ssl_context();
    s->gated_ = ssl.get();
    s->server_ = std::move(ssl);
  } else {
    auto plain = std::make_unique<GatedServer<httplib::Server>>();
    s->gated_ = plain.get();
    s->server_ = std::move(plain);
  }
  if (options.threads <= static_cast<size_t>(v1::MAX_EVENT_STREAMS)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the HTTP port needs more than MAX_EVENT_STREAMS (", v1::MAX_EVENT_STREAMS,
                     ") threads, so that event streams never hold them all"));
  }
  httplib::Server& srv = *s->server_;
  srv.new_task_queue = [] { return new AdmitAtOnce(); };
  // One route for httplib: HttpServer's own table (Get) can grow while the
  // port already serves /healthz during start-up.
  HttpServer* self = s.get();
  srv.Get(".*", [self](const httplib::Request& req, httplib::Response& res) {
    self->Dispatch(req, res);
  });
  srv.set_payload_max_length(options.max_body_bytes);
  srv.set_default_headers({{"X-Content-Type-Options", "nosniff"}, {"Cache-Control", "no-store"}});
  srv.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SendError(res, absl::InternalError(absl::StrCat("internal error: ", what)));
      });
  srv.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      SendError(res, absl::NotFoundError(absl::StrCat("no such page: ", req.path.substr(0, 200),
                                                      " (see docs/http-api.md)")));
    } else if (res.status == 413) {
      SendError(res, absl::ResourceExhaustedError("request too large"));
      res.status = 413;
    }
  });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Get(const std::string& pattern, Role role, Handler handler, bool while_starting) {
  std::unique_lock<std::shared_mutex> lock(routes_mu_);
  routes_.push_back(Route{std::regex(pattern), role, std::move(handler), while_starting});
}

void HttpServer::SetReady(bool ready) { ready_.store(ready); }

void HttpServer::Dispatch(const httplib::Request& req, httplib::Response& res) {
  const bool ready = ready_.load();
  Role role = Role::kNone;
  Handler handler;
  {
    std::shared_lock<std::shared_mutex> lock(routes_mu_);
    for (const Route& route : routes_) {
      // httplib's own Request (non-const in process_request): the handlers
      // read the pattern's groups from req.matches, as with httplib's routing.
      if (std::regex_match(req.path, const_cast<httplib::Request&>(req).matches, route.pattern)) {
        if (ready || route.while_starting) {
          role = route.role;
          handler = route.handler;
        }
        break;
      }
    }
  }
  if (!handler) {
    if (ready) {
      res.status = 404;  // the error handler writes the JSON body
    } else {
      SendError(res, absl::UnavailableError(
                         "the collector is starting: it is recovering its index from the data "
                         "directory; retry shortly (/healthz answers 200 once it is done)"));
    }
    return;
  }
  if (access_ == nullptr) {
    handler(req, CallAccess::Everything("anonymous"), res);
    NoteStreaming(res);
    return;
  }
  const std::string authorization = req.get_header_value("Authorization");
  const absl::Status allowed =
      access_->AuthorizeRole(role, absl::StrCat("GET ", req.path.substr(0, 200)), authorization,
                             "send the header `Authorization: Bearer TOKEN`");
  if (!allowed.ok()) {
    SendError(res, allowed);
    return;
  }
  handler(req,
          role == Role::kNone ? CallAccess::Everything("anonymous")
                              : access_->ForAuthorization(authorization),
          res);
  NoteStreaming(res);
}

absl::Status HttpServer::Start() {
  const size_t colon = options_.listen.rfind(':');
  const std::string host = HostOf(options_.listen);
  int port = 0;
  (void)absl::SimpleAtoi(options_.listen.substr(colon + 1), &port);
  const int bound = port == 0                           ? server_->bind_to_any_port(host)
                    : server_->bind_to_port(host, port) ? port
                                                        : -1;
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on --http-listen ", options_.listen,
                                               " (address in use or not available?)"));
  }
  address_ = absl::StrCat(options_.listen.substr(0, colon), ":", bound);
  TK_RETURN_IF_ERROR(gated_->StartServing(options_, tls_));
  started_ = true;
  thread_ = std::thread([this] {
    if (!server_->listen_after_bind() && !stopping_.load()) {
      spdlog::error("the HTTP server on {} stopped", address_);
    }
    listen_returned_.store(true);
  });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (!started_) return;
  // stop() does nothing before the listening loop runs: wait for it (bounded).
  for (int i = 0; i < 5000 && !server_->is_running() && !listen_returned_.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->stop();
  if (thread_.joinable()) thread_.join();
  gated_->StopServing();
}

size_t HttpServer::open_connections() const { return gated_->open_connections(); }

}  // namespace tensorkeep
