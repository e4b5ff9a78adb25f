// Connection: a channel and stub to one collector, shared by Trial, Tensor
// and Writer objects; and the mapping of gRPC statuses back to tensorkeep's
// reasons (base/errors.h), so that callers see TensorUnavailableForStep & co.
//
// Thread safety: thread-safe (gRPC stubs are).
#ifndef TENSORKEEP_CLIENT_CONNECTION_H_
#define TENSORKEEP_CLIENT_CONNECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/credentials.h"
#include "grpcpp/grpcpp.h"
#include "proto/tensorkeep.grpc.pb.h"

namespace tensorkeep {

// The default collector address, and the environment variable that overrides it.
inline constexpr char kDefaultServer[] = "127.0.0.1:7077";
inline constexpr char kServerEnv[] = "TENSORKEEP_SERVER";

// `address` if non-empty, else $TENSORKEEP_SERVER, else kDefaultServer.
std::string ResolveServer(const std::string& address);

class Connection {
 public:
  // Creates the channel (lazily connected), with TLS and token from
  // `security`, each empty field from the environment (ResolveSecurity).
  // Fails on an empty address or credentials that cannot be made (a file
  // not readable, a token without TLS to a remote address).
  static absl::StatusOr<std::shared_ptr<Connection>> Open(const std::string& address,
                                                          const ClientSecurity& security = {});

  const std::string& address() const { return address_; }
  // Whether the channel uses TLS.
  bool tls() const { return tls_; }
  v1::TensorKeep::Stub* stub() const { return stub_.get(); }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // The same collector over the same channel, whose client::Trial and
  // client::Tensor calls also see unpublished trials (the copies `tensorkeep
  // rebalance` writes; base/unpublished.h).
  std::shared_ptr<Connection> SeeingUnpublished() const;
  // Adds this connection's request metadata to a call's context.
  void Prepare(grpc::ClientContext* context) const;

 private:
  Connection(std::string address, bool tls, std::shared_ptr<grpc::Channel> channel);
  std::string address_;
  bool tls_ = false;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<v1::TensorKeep::Stub> stub_;
  bool unpublished_ = false;
};

// A gRPC status as absl::Status, with the "tk-reason" trailing metadata of
// `context` (may be null) attached as the reason payload. Connection
// failures say which address could not be reached.
absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext* context,
                      const std::string& address);
// The same, and an UNAVAILABLE says when the client and the collector
// disagree about TLS (ExplainTransportMismatch); when one speaks TLS and the
// other not, it becomes FAILED_PRECONDITION (retrying cannot help).
absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext* context,
                      const Connection& connection);

}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CONNECTION_H_
