#include "server/metrics/grpc_request_metrics.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace {

constexpr const char* kCodeNames[] = {
    "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
    "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
    "DataLoss", "Unauthenticated"};

class CountingInterceptor : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(GrpcRequestMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->Count(method_, static_cast<int>(methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  GrpcRequestMetrics* const metrics_;
  const char* const method_;
};

class CountingFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(GrpcRequestMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CountingInterceptor(metrics_, info->method());
  }

 private:
  GrpcRequestMetrics* const metrics_;
};

}  // namespace

GrpcRequestMetrics::GrpcRequestMetrics() {
  const google::protobuf::ServiceDescriptor* service =
      v1::PushRequest::descriptor()->file()->FindServiceByName("TensorKeep");
  for (int i = 0; i < service->method_count(); ++i) {
    methods_.push_back({service->full_name(), service->method(i)->name()});
  }
  methods_.push_back({"grpc.health.v1.Health", "Check"});
  methods_.push_back({"grpc.health.v1.Health", "Watch"});
  methods_.push_back({"grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo"});
  for (size_t i = 0; i < methods_.size(); ++i) {
    index_[absl::StrCat("/", methods_[i].service, "/", methods_[i].method)] = i;
  }
  methods_.push_back({"", "other"});
  counts_.reset(new Counter[methods_.size() * kCodes]);
}

size_t GrpcRequestMetrics::Index(std::string_view path) const {
  auto it = index_.find(std::string(path));
  return it == index_.end() ? methods_.size() - 1 : it->second;
}

void GrpcRequestMetrics::Count(std::string_view path, int code) {
  if (code < 0 || code >= kCodes) code = 2;  // UNKNOWN
  counts_[Index(path) * kCodes + code].Add();
}

uint64_t GrpcRequestMetrics::count(std::string_view path, int code) const {
  if (code < 0 || code >= kCodes) return 0;
  return counts_[Index(path) * kCodes + code].value();
}

void GrpcRequestMetrics::Write(PrometheusText* out) const {
  out->Family("grpc_server_handled_total", "counter",
              "gRPC calls finished by the collector, by method and status code");
  for (size_t m = 0; m < methods_.size(); ++m) {
    for (int c = 0; c < kCodes; ++c) {
      const uint64_t n = counts_[m * kCodes + c].value();
      if (n == 0) continue;
      out->Sample("grpc_server_handled_total",
                  {{"grpc_service", methods_[m].service},
                   {"grpc_method", methods_[m].method},
                   {"grpc_code", kCodeNames[c]}},
                  static_cast<double>(n));
    }
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
GrpcRequestMetrics::InterceptorFactory() {
  return std::make_unique<CountingFactory>(this);
}

}  // namespace tensorkeep
