#include "server/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/errors.h"

namespace tensorkeep {
namespace {

std::string CappedMessage(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  size_t cut = kMaxStatusMessageBytes - 64;  // room for the note
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(message.substr(0, cut), "... (message cut from ", message.size(), " bytes)");
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status, grpc::CallbackServerContext* context) {
  if (status.ok()) return grpc::Status::OK;
  const Reason reason = GetReason(status);
  if (context != nullptr && reason != Reason::kNone) {
    context->AddTrailingMetadata(kReasonKey, std::string(ReasonName(reason)));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      CappedMessage(status.message()));
}

}  // namespace tensorkeep
