// The error reasons of tensorkeep: smdebug's exceptions and the service's own
// failures. The core returns them as absl::Status with the reason attached
// as a payload; the gRPC layer sends code + message + "tk-reason" trailing
// metadata; the clients turn that back into the reason (or the exception).
#ifndef TENSORKEEP_BASE_ERRORS_H_
#define TENSORKEEP_BASE_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensorkeep {

enum class Reason {
  kNone,                      // no tensorkeep reason attached
  kTrialNotFound,             // NOT_FOUND
  kTensorUnavailable,         // FAILED_PRECONDITION
  kTensorUnavailableForStep,  // ABORTED
  kStepUnavailable,           // OUT_OF_RANGE
  kStepNotYetAvailable,       // UNAVAILABLE
  kInvalidWorker,             // INVALID_ARGUMENT
  kNoMoreData,                // RESOURCE_EXHAUSTED
  kConflict,                  // ALREADY_EXISTS
  kBadRequest,                // INVALID_ARGUMENT
  kTimeout,                   // DEADLINE_EXCEEDED
  kStorageFull,               // RESOURCE_EXHAUSTED: the collector's disk; writers resend
  kWrongCollector,            // FAILED_PRECONDITION: the trial belongs to another collector
};

// The metadata key (and absl payload type URL) that carries the reason.
inline constexpr char kReasonKey[] = "tk-reason";

// "TRIAL_NOT_FOUND", ... ("" for kNone).
absl::string_view ReasonName(Reason reason);
// Inverse of ReasonName; kNone for unknown names.
Reason ReasonFromName(absl::string_view name);
// The status code that goes with a reason.
absl::StatusCode ReasonCode(Reason reason);

// A status with the reason's code, `message`, and the reason as payload.
absl::Status MakeError(Reason reason, absl::string_view message);
// The reason attached to `status`, kNone if none.
Reason GetReason(const absl::Status& status);

// How much of a client's text an error message may quote.
inline constexpr size_t kMaxQuotedBytes = 100;

// `text` quoted for an error message: in single quotes, control characters
// C-escaped, and cut after `max_bytes` (at a UTF-8 character boundary) with
// "...' (N bytes)" saying how long it was. Every message that echoes client
// input quotes it with this: gRPC sends the message in the trailing metadata,
// and a reply that exceeds the metadata limit reaches the client as a bare
// RESOURCE_EXHAUSTED without the reason.
std::string QuoteInput(absl::string_view text, size_t max_bytes = kMaxQuotedBytes);

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_ERRORS_H_
