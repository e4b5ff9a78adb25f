// The one place where absl::Status becomes grpc::Status: same code, same
// message, and the tensorkeep reason (base/errors.h) in the "tk-reason"
// trailing metadata.
#ifndef TENSORKEEP_SERVER_GRPC_STATUS_H_
#define TENSORKEEP_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace tensorkeep {

// `context` (not owned) receives the trailing metadata; may be null.
grpc::Status ToGrpcStatus(const absl::Status& status, grpc::CallbackServerContext* context);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_GRPC_STATUS_H_
