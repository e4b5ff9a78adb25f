#include "base/errors.h"

#include "absl/strings/cord.h"

namespace tensorkeep {
namespace {

struct ReasonInfo {
  Reason reason;
  absl::string_view name;
  absl::StatusCode code;
};

constexpr ReasonInfo kReasons[] = {
    {Reason::kTrialNotFound, "TRIAL_NOT_FOUND", absl::StatusCode::kNotFound},
    {Reason::kTensorUnavailable, "TENSOR_UNAVAILABLE", absl::StatusCode::kFailedPrecondition},
    {Reason::kTensorUnavailableForStep, "TENSOR_UNAVAILABLE_FOR_STEP",
     absl::StatusCode::kAborted},
    {Reason::kStepUnavailable, "STEP_UNAVAILABLE", absl::StatusCode::kOutOfRange},
    {Reason::kStepNotYetAvailable, "STEP_NOT_YET_AVAILABLE", absl::StatusCode::kUnavailable},
    {Reason::kInvalidWorker, "INVALID_WORKER", absl::StatusCode::kInvalidArgument},
    {Reason::kNoMoreData, "NO_MORE_DATA", absl::StatusCode::kResourceExhausted},
    {Reason::kConflict, "CONFLICT", absl::StatusCode::kAlreadyExists},
    {Reason::kBadRequest, "BAD_REQUEST", absl::StatusCode::kInvalidArgument},
    {Reason::kTimeout, "TIMEOUT", absl::StatusCode::kDeadlineExceeded},
};

}  // namespace

absl::string_view ReasonName(Reason reason) {
  for (const auto& r : kReasons) {
    if (r.reason == reason) return r.name;
  }
  return "";
}

Reason ReasonFromName(absl::string_view name) {
  for (const auto& r : kReasons) {
    if (r.name == name) return r.reason;
  }
  return Reason::kNone;
}

absl::StatusCode ReasonCode(Reason reason) {
  for (const auto& r : kReasons) {
    if (r.reason == reason) return r.code;
  }
  return absl::StatusCode::kUnknown;
}

absl::Status MakeError(Reason reason, absl::string_view message) {
  absl::Status status(ReasonCode(reason), message);
  status.SetPayload(kReasonKey, absl::Cord(ReasonName(reason)));
  return status;
}

Reason GetReason(const absl::Status& status) {
  auto payload = status.GetPayload(kReasonKey);
  if (!payload.has_value()) return Reason::kNone;
  return ReasonFromName(std::string(*payload));
}

}  // namespace tensorkeep
