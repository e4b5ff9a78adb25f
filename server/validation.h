// Checks of the names and values that arrive from clients. Every failure is
// a BAD_REQUEST error whose message says what is wrong and what is allowed.
#ifndef TENSORKEEP_SERVER_VALIDATION_H_
#define TENSORKEEP_SERVER_VALIDATION_H_

#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace tensorkeep {

inline constexpr size_t kMaxTrialName = 128;
inline constexpr size_t kMaxWorkerName = 128;
inline constexpr size_t kMaxTensorName = 256;
inline constexpr size_t kMaxCollectionName = 128;
inline constexpr size_t kMaxRank = 32;
// Steps are 63-bit so that a negative step sent as unsigned is caught.
inline constexpr uint64_t kMaxStep = (1ull << 62);
inline constexpr uint32_t kMaxWorkers = 65535;

// Trial names: 1-128 characters from [A-Za-z0-9._-].
absl::Status ValidateTrialName(absl::string_view name);
// Worker and rule names: 1-128 characters from [A-Za-z0-9._:/-].
absl::Status ValidateWorkerName(absl::string_view name);
// Tensor and collection names: 1-256 (128) bytes, no control characters.
absl::Status ValidateTensorName(absl::string_view name);
absl::Status ValidateCollectionName(absl::string_view name);
absl::Status ValidateStep(uint64_t step, absl::string_view what);
// TRAIN, EVAL, PREDICT or GLOBAL; `allow_unspecified` accepts 0 as GLOBAL.
absl::Status ValidateMode(int mode, bool allow_unspecified);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_VALIDATION_H_
