#include "server/http/http_server.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/loopback.h"
#include "base/status_macros.h"
#include "server/http/http_errors.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace {

// cpp-httplib's ThreadPool queues accepted connections without a bound; this
// one makes the accepting thread wait while `max_queued` wait already, so
// that further clients wait in the kernel's backlog instead of in memory.
class BoundedPool : public httplib::TaskQueue {
 public:
  BoundedPool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [&] { return jobs_.size() < max_queued_ || shutdown_; });
    jobs_.push_back(std::move(fn));
    ready_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    ready_.notify_all();
    space_.notify_all();
    for (auto& t : threads_) t.join();
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
        space_.notify_one();
      }
      fn();
    }
  }

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<std::function<void()>> jobs_;
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
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
    auto ssl = std::make_unique<httplib::SSLServer>(
        sec.tls_cert.c_str(), sec.tls_key.c_str(),
        sec.tls_client_ca.empty() ? nullptr : sec.tls_client_ca.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--http-listen: cannot serve TLS with --tls-cert '", sec.tls_cert, "' and --tls-key '",
          sec.tls_key, "' (not a matching PEM certificate and key?)"));
    }
    s->server_ = std::move(ssl);
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& srv = *s->server_;
  const size_t threads = options.threads, queued = options.max_queued;
  srv.new_task_queue = [threads, queued] { return new BoundedPool(threads, queued); };
  srv.set_payload_max_length(options.max_body_bytes);
  srv.set_read_timeout(options.timeout_seconds, 0);
  srv.set_write_timeout(options.timeout_seconds, 0);
  srv.set_keep_alive_timeout(5);
  srv.set_keep_alive_max_count(options.keep_alive_max_requests);
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

void HttpServer::Get(const std::string& pattern, Role role, Handler handler) {
  server_->Get(pattern, [this, role, handler = std::move(handler)](const httplib::Request& req,
                                                                   httplib::Response& res) {
    if (access_ == nullptr) {
      handler(req, CallAccess::Everything("anonymous"), res);
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
  });
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
}

}  // namespace tensorkeep
