#include "client/connection.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/unpublished.h"
#include "proto/limits.pb.h"

namespace tensorkeep {

std::string ResolveServer(const std::string& address) {
  if (!address.empty()) return address;
  const char* env = std::getenv(kServerEnv);
  if (env != nullptr && *env != '\0') return env;
  return kDefaultServer;
}

Connection::Connection(std::string address, bool tls, std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)),
      tls_(tls),
      channel_(std::move(channel)),
      stub_(v1::TensorKeep::NewStub(channel_)) {}

std::shared_ptr<Connection> Connection::SeeingUnpublished() const {
  std::shared_ptr<Connection> c(new Connection(*this));
  c->unpublished_ = true;
  return c;
}

void Connection::Prepare(grpc::ClientContext* context) const {
  if (unpublished_) context->AddMetadata(kUnpublishedMetadata, "1");
}

absl::StatusOr<std::shared_ptr<Connection>> Connection::Open(const std::string& address,
                                                             const ClientSecurity& flags) {
  if (address.empty()) return absl::InvalidArgumentError("empty collector address");
  const ClientSecurity security = ResolveSecurity(flags);
  auto credentials = MakeChannelCredentials(security, address);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  // Reconnect as quickly as writers retry after a collector restart (gRPC's
  // default starts at 1 s and backs off up to 120 s); proto/limits.proto.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, v1::RECONNECT_BACKOFF_FIRST_MS);
  // (gRPC's "min reconnect backoff" is the time a connection attempt is
  // given: its handshakes must fit in it.)
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, v1::RECONNECT_CONNECT_TIMEOUT_MS);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, v1::RECONNECT_BACKOFF_MAX_MS);
  // A collector that hangs (SIGSTOP, a frozen host) keeps the TCP connection
  // open: ping it and drop the connection when it does not answer, so that a
  // Writer reconnects (or gives up after its retry timeout) instead of waiting
  // forever; proto/limits.proto, KeepalivePolicy (the collector permits it).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, v1::KEEPALIVE_TIME_MS);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, v1::KEEPALIVE_TIMEOUT_MS);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  auto channel = grpc::CreateCustomChannel(address, *credentials, args);
  return std::shared_ptr<Connection>(new Connection(address, security.tls(), std::move(channel)));
}

absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext* context,
                      const std::string& address) {
  if (status.ok()) return absl::OkStatus();
  Reason reason = Reason::kNone;
  if (context != nullptr) {
    const auto& md = context->GetServerTrailingMetadata();
    auto it = md.find(kReasonKey);
    if (it != md.end()) reason = ReasonFromName(std::string(it->second.data(), it->second.size()));
  }
  if (reason != Reason::kNone) return MakeError(reason, status.error_message());
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::UnavailableError(absl::StrCat("cannot reach the collector at ", address, ": ",
                                               status.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext* context,
                      const Connection& connection) {
  absl::Status s = FromGrpc(status, context, connection.address());
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && GetReason(s) == Reason::kNone) {
    const TransportExplanation e = ExplainTransportMismatch(connection.address(), connection.tls());
    // A client and a collector that disagree about TLS stay so: the error is
    // the configuration's (FAILED_PRECONDITION), not worth a retry.
    if (e.mismatch) {
      return absl::FailedPreconditionError(absl::StrCat(e.why, " (", s.message(), ")"));
    }
    if (!e.why.empty()) return absl::UnavailableError(absl::StrCat(e.why, " (", s.message(), ")"));
  }
  return s;
}

}  // namespace tensorkeep
