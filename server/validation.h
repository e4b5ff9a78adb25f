// Checks of the names and values that arrive from clients. Every failure is
// a BAD_REQUEST error whose message says what is wrong and what is allowed,
// and quotes the client's text at most QuoteInput's few bytes (base/errors.h).
//
// The limits come from proto/limits.proto, the one definition the clients
// check too; the constants below only give them C++ types.
#ifndef TENSORKEEP_SERVER_VALIDATION_H_
#define TENSORKEEP_SERVER_VALIDATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/limits.pb.h"

namespace tensorkeep {

inline constexpr size_t kMaxTrialName = v1::MAX_TRIAL_NAME_BYTES;
inline constexpr size_t kMaxWorkerName = v1::MAX_WORKER_NAME_BYTES;
inline constexpr size_t kMaxTensorName = v1::MAX_TENSOR_NAME_BYTES;
inline constexpr size_t kMaxCollectionName = v1::MAX_COLLECTION_NAME_BYTES;
inline constexpr size_t kMaxRank = v1::MAX_RANK;
// Steps are 62-bit so that a negative step sent as unsigned is caught.
inline constexpr uint64_t kMaxStep = 1ull << v1::MAX_STEP_BITS;
inline constexpr uint32_t kMaxWorkers = v1::MAX_WORKERS;
inline constexpr uint32_t kMaxAttempt = v1::MAX_ATTEMPT;
inline constexpr size_t kMaxRecordedRestarts = v1::MAX_RECORDED_RESTARTS;
inline constexpr size_t kMaxTensorNamesPerTrial = v1::MAX_TENSOR_NAMES_PER_TRIAL;
inline constexpr size_t kMaxTrials = v1::MAX_TRIALS;
inline constexpr size_t kMaxStepsPerTrial = v1::MAX_STEPS_PER_TRIAL;
inline constexpr size_t kMaxRegexBytes = v1::MAX_REGEX_BYTES;
inline constexpr size_t kMaxRegexes = v1::MAX_REGEXES;
// PutCollections (server/collection_config.h).
inline constexpr size_t kMaxCollections = v1::MAX_COLLECTIONS;
inline constexpr size_t kMaxCollectionConfigBytes = v1::MAX_COLLECTION_CONFIG_BYTES;
inline constexpr size_t kMaxRuleMessageBytes = v1::MAX_RULE_MESSAGE_BYTES;
inline constexpr size_t kMaxReductionNameBytes = v1::MAX_REDUCTION_NAME_BYTES;
inline constexpr int kMaxWaitSteps = v1::MAX_WAIT_STEPS;

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
// ListTensorNames' regexes: at most kMaxRegexes, each at most kMaxRegexBytes.
// (Whether RE2 accepts them is Trial::TensorNames' check.)
absl::Status ValidateRegexes(const std::vector<std::string>& regexes);
// A reduction's name: at most kMaxReductionNameBytes (ParseReduction says
// whether it is known).
absl::Status ValidateReductionName(absl::string_view name);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_VALIDATION_H_
