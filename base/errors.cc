#include "base/errors.h"

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

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
    {Reason::kTensorUnavailableForStep, "TENSOR_UNAVAILABLE_FOR_STEP", absl::StatusCode::kAborted},
    {Reason::kStepUnavailable, "STEP_UNAVAILABLE", absl::StatusCode::kOutOfRange},
    {Reason::kStepNotYetAvailable, "STEP_NOT_YET_AVAILABLE", absl::StatusCode::kUnavailable},
    {Reason::kInvalidWorker, "INVALID_WORKER", absl::StatusCode::kInvalidArgument},
    {Reason::kNoMoreData, "NO_MORE_DATA", absl::StatusCode::kResourceExhausted},
    {Reason::kConflict, "CONFLICT", absl::StatusCode::kAlreadyExists},
    {Reason::kBadRequest, "BAD_REQUEST", absl::StatusCode::kInvalidArgument},
    {Reason::kTimeout, "TIMEOUT", absl::StatusCode::kDeadlineExceeded},
    {Reason::kStorageFull, "STORAGE_FULL", absl::StatusCode::kResourceExhausted},
    {Reason::kWrongCollector, "WRONG_COLLECTOR", absl::StatusCode::kFailedPrecondition},
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

std::string QuoteInput(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::StrCat("'", absl::Utf8SafeCHexEscape(text), "'");
  size_t cut = max_bytes;
  // Back up to the start of a UTF-8 character (at most 3 continuation bytes).
  for (int i = 0; i < 3 && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80; ++i) {
    --cut;
  }
  return absl::StrCat("'", absl::Utf8SafeCHexEscape(text.substr(0, cut)), "...' (", text.size(),
                      " bytes)");
}

}  // namespace tensorkeep
