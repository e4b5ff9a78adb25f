#include "server/collector_server.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/limits.pb.h"
#include "server/http/web_ui.h"
#include "server/metrics/collector_metrics.h"
#include "server/metrics/prometheus_text.h"
#include "server/starting_service.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {

absl::StatusOr<std::unique_ptr<CollectorServer>> CollectorServer::Start(
    const ServerOptions& options) {
  std::unique_ptr<CollectorServer> s(new CollectorServer());
  // Flags first: a misconfigured collector must not touch the data.
  if (!options.security.auth_tokens.empty()) {
    TK_ASSIGN_OR_RETURN(s->access_, AccessControl::Load(options.security.auth_tokens));
  }
  TK_ASSIGN_OR_RETURN(auto credentials,
                      MakeServerCredentials(options.security, options.listen, s->access_.get()));
  if (!options.http_listen.empty()) {
    HttpOptions http = options.http;
    http.listen = options.http_listen;
    http.security = options.security;
    TK_ASSIGN_OR_RETURN(s->http_, HttpServer::Create(http, s->access_.get()));
  }
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen '", options.listen, "' is not HOST:PORT"));
  }
  s->data_dir_ = options.store.path;
  s->grpc_metrics_ = std::make_unique<GrpcRequestMetrics>();
  // The ports open before the data directory: while LevelDB and the index
  // recover (minutes on a large store) probes and clients see a collector
  // that is starting (health NOT_SERVING, /healthz 503, every other call
  // UNAVAILABLE saying so: StartingService), not a refused connection.
  s->starting_ = std::make_unique<StartingService>();
  // Standard tools (grpcurl, grpc_health_probe, Kubernetes' gRPC probes)
  // find the health service and, through reflection, the API.
  static std::once_flag plugins;
  std::call_once(plugins, [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &s->port_);
  builder.RegisterService(s->starting_.get());
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(s->grpc_metrics_->InterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  // gRPC binds with SO_REUSEPORT by default: a second collector on the same
  // port (with another data directory) would then start and take a random
  // share of the clients. Refuse the port instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Flow-control windows follow the link: gRPC's BDP probing sizes each
  // connection's window to its measured bandwidth-delay product (at least
  // 4 MiB), so one writer across a 20 ms link is not held to a fixed window
  // a round trip (it was 1 MiB: 44 MB/s at 20 ms; bench `rtt`). The memory
  // those windows may hold is bounded by gRPC's memory quota
  // (grpc_memory_bytes), under which gRPC shrinks them. Streams paused by the
  // memory budget stay within it: 64 writers of 1 MiB tensors peaked at
  // 250-355 MiB RSS (190 MiB with a fixed 1 MiB window), no writer failing
  // in 6 runs (bench `memory`). (When this was tried before the memory budget
  // paused reads, writers failed in 16 of 17 runs.)
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1 << 20);
  // A writer whose host or network died holds its (trial, worker) until the
  // server sees its stream end (WriteSession): ping idle connections so that
  // takes about a minute, not the kernel's TCP timeout of hours.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Clients ping every KEEPALIVE_TIME_MS to detect a hung collector
  // (client/connection.cc, the Python _channel.py): accept that (gRPC's
  // default allows one ping in 5 minutes and answers more with GOAWAY).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             v1::KEEPALIVE_MIN_PING_INTERVAL_MS);
  // Values beyond one message come in chunks: a client cannot make gRPC
  // hold more than this for one message (proto/limits.proto).
  builder.SetMaxReceiveMessageSize(
      std::min<int>(options.max_message_bytes, v1::MAX_PUSH_MESSAGE_BYTES));
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  if (options.grpc_memory_bytes > 0) {
    grpc::ResourceQuota quota("tensorkeep-server");
    quota.Resize(options.grpc_memory_bytes);
    builder.SetResourceQuota(quota);
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (address in use or not available?)"));
  }
  s->address_ = absl::StrCat(options.listen.substr(0, colon), ":", s->port_);
  s->server_->GetHealthCheckService()->SetServingStatus(false);
  if (s->http_ != nullptr) {
    CollectorServer* self = s.get();
    s->http_->Get(
        "/healthz", Role::kNone,
        [self](const httplib::Request&, const CallAccess&, httplib::Response& res) {
          const bool serving = self->serving_.load();
          res.status = serving ? 200 : 503;
          res.set_content(serving ? "ok\n"
                                  : "not serving (starting: recovering the index; or "
                                    "draining: shutting down)\n",
                          "text/plain; charset=utf-8");
        },
        /*while_starting=*/true);
    s->http_->SetReady(false);
    TK_RETURN_IF_ERROR(s->http_->Start());
  }
  spdlog::info("starting: gRPC port {}{}{} open, not serving until the data in {} is recovered",
               s->address_, s->http_ != nullptr ? " and HTTP port " : "",
               s->http_ != nullptr ? s->http_->address() : "", options.store.path);
  if (options.test_recovery_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options.test_recovery_delay_ms));
  }
  s->test_drain_delay_ms_ = options.test_drain_delay_ms;

  TK_ASSIGN_OR_RETURN(s->store_, LevelDbTensorStore::Open(options.store));
  if (!s->store_->open_note().empty()) spdlog::warn("{}", s->store_->open_note());
  auto collector = Collector::Create(options.collector, s->store_.get());
  if (!collector.ok()) {
    return absl::Status(
        collector.status().code(),
        absl::StrCat("data directory ", options.store.path, ": ", collector.status().message()));
  }
  s->collector_ = std::move(*collector);
  s->service_ = std::make_unique<TensorKeepService>(s->collector_.get(), s->access_.get());
  s->starting_->Serve(s->service_.get());
  if (s->http_ != nullptr) {
    CollectorServer* self = s.get();
    s->http_->Get("/metrics", Role::kRead,
                  [self](const httplib::Request&, const CallAccess&, httplib::Response& res) {
                    res.set_content(self->MetricsText(), kPrometheusContentType);
                  });
    s->api_ = std::make_unique<ApiV1>(s->collector_.get(), s->http_.get());
    RegisterWebUi(s->http_.get());
    s->http_->SetReady(true);
  }
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  s->serving_.store(true);
  return s;
}

std::string CollectorServer::MetricsText() const {
  CollectorMetricsSources sources;
  sources.collector = collector_.get();
  sources.grpc = grpc_metrics_.get();
  sources.data_dir = data_dir_;
  sources.open_streams = service_->active_pushes();
  sources.serving = serving_.load();
  return CollectorMetricsText(sources);
}

absl::Status CollectorServer::ReloadTokens() {
  if (access_ == nullptr) {
    return absl::FailedPreconditionError("no --auth-tokens file to reload");
  }
  return access_->Reload();
}

CollectorServer::~CollectorServer() { Shutdown(); }

void CollectorServer::Shutdown(double grace_seconds) {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) {
    // gRPC's Shutdown(deadline) waits for the whole deadline while any client
    // keeps a channel open, busy or not. So drain the writers ourselves:
    // refuse new Push streams, end the open ones once what they read is
    // durable and acknowledged (their writers reconnect to the restarted
    // collector and resend the rest), wait for that (bounded), then stop gRPC
    // with a short deadline, cancelling read-only calls (waits and watches
    // are resumable).
    server_->GetHealthCheckService()->SetServingStatus(false);
    serving_.store(false);
    if (test_drain_delay_ms_ > 0) {  // tests: a drain window long enough to observe
      std::this_thread::sleep_for(std::chrono::milliseconds(test_drain_delay_ms_));
    }
    if (service_ != nullptr) service_->StartDraining();
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000));
    if (service_ != nullptr && service_->active_pushes() > 0) {
      spdlog::info("waiting up to {} s for {} writer stream(s) to end", grace_seconds,
                   service_->active_pushes());
    }
    while (service_ != nullptr && service_->active_pushes() > 0 &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  }
  // The HTTP handlers use the collector: stop them first (event streams
  // wake and end, then the server waits for its handlers).
  if (api_ != nullptr) api_->StopStreams();
  if (http_ != nullptr) http_->Stop();
  api_.reset();
  collector_.reset();  // drains the committer
  server_.reset();
  service_.reset();
  store_.reset();
}

}  // namespace tensorkeep
