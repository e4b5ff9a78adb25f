#include "server/grpc_status.h"

#include <string>

#include "base/errors.h"

namespace tensorkeep {

grpc::Status ToGrpcStatus(const absl::Status& status, grpc::CallbackServerContext* context) {
  if (status.ok()) return grpc::Status::OK;
  const Reason reason = GetReason(status);
  if (context != nullptr && reason != Reason::kNone) {
    context->AddTrailingMetadata(kReasonKey, std::string(ReasonName(reason)));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace tensorkeep
