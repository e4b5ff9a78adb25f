// The one place where absl::Status becomes grpc::Status: same code, same
// message, and the tensorkeep reason (base/errors.h) in the "tk-reason"
// trailing metadata.
#ifndef TENSORKEEP_SERVER_GRPC_STATUS_H_
#define TENSORKEEP_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace tensorkeep {

// The longest message sent. gRPC carries it percent-encoded in the trailing
// metadata, whose default limit is 8 KiB: a longer one would reach the client
// as a bare RESOURCE_EXHAUSTED, without the message or the reason. Messages
// quote client input through QuoteInput (base/errors.h); this is the last
// guard for one that does not.
inline constexpr size_t kMaxStatusMessageBytes = 2048;

// `context` (not owned) receives the trailing metadata; may be null. A
// message longer than kMaxStatusMessageBytes is cut (at a UTF-8 character
// boundary) and says so.
grpc::Status ToGrpcStatus(const absl::Status& status, grpc::CallbackServerContext* context);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_GRPC_STATUS_H_
