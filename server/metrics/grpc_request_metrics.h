// GrpcRequestMetrics: calls of the collector's gRPC methods by method and
// status code, counted by a server interceptor when each call sends its
// status (a table of atomic counters: no lock, no allocation on the call's
// path beyond the interceptor gRPC makes per call). Calls refused before any
// handler (a missing or unknown token) never reach interceptors and are not
// counted here.
//
// Exposed as grpc_server_handled_total{grpc_service, grpc_method, grpc_code},
// the names of the Go and Java gRPC Prometheus integrations, so existing
// dashboards work.
//
// Thread safety: thread-safe.
#ifndef TENSORKEEP_SERVER_METRICS_GRPC_REQUEST_METRICS_H_
#define TENSORKEEP_SERVER_METRICS_GRPC_REQUEST_METRICS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/metrics/instruments.h"
#include "server/metrics/prometheus_text.h"

namespace tensorkeep {

class GrpcRequestMetrics {
 public:
  // Knows the methods of the TensorKeep, health and reflection services;
  // other paths count under grpc_method "other".
  GrpcRequestMetrics();

  // Counts one finished call of `path` ("/package.Service/Method").
  void Count(std::string_view path, int code);
  // Calls so far of `path` with `code` (tests).
  uint64_t count(std::string_view path, int code) const;

  // Writes the family (only series with a non-zero count).
  void Write(PrometheusText* out) const;

  // The interceptor factory to give grpc::ServerBuilder.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

 private:
  static constexpr int kCodes = 17;  // grpc::StatusCode OK .. UNAUTHENTICATED
  size_t Index(std::string_view path) const;

  struct Method {
    std::string service, method;
  };
  std::vector<Method> methods_;  // the last is "other"
  absl::flat_hash_map<std::string, size_t> index_;
  std::unique_ptr<Counter[]> counts_;  // methods_.size() * kCodes
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_METRICS_GRPC_REQUEST_METRICS_H_
