#include "server/validation.h"

#include "absl/strings/str_cat.h"
#include "base/errors.h"

namespace tensorkeep {
namespace {

absl::Status CheckName(absl::string_view name, absl::string_view what, size_t max,
                       bool (*allowed)(char), absl::string_view allowed_text) {
  if (name.empty()) return MakeError(Reason::kBadRequest, absl::StrCat(what, " is empty"));
  if (name.size() > max) {
    return MakeError(Reason::kBadRequest,
                     absl::StrCat(what, " ", QuoteInput(name, 40), " is too long; the limit is ",
                                  max, " bytes"));
  }
  for (char c : name) {
    if (!allowed(c)) {
      return MakeError(
          Reason::kBadRequest,
          absl::StrCat(what, " ", QuoteInput(name), " has a character outside ", allowed_text));
    }
  }
  return absl::OkStatus();
}

bool TrialChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}
bool WorkerChar(char c) { return TrialChar(c) || c == ':' || c == '/'; }
bool PrintableChar(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u >= 0x20 && u != 0x7F;
}

}  // namespace

absl::Status ValidateTrialName(absl::string_view name) {
  return CheckName(name, "trial name", kMaxTrialName, TrialChar, "[A-Za-z0-9._-]");
}
absl::Status ValidateWorkerName(absl::string_view name) {
  return CheckName(name, "worker name", kMaxWorkerName, WorkerChar, "[A-Za-z0-9._:/-]");
}
absl::Status ValidateTensorName(absl::string_view name) {
  return CheckName(name, "tensor name", kMaxTensorName, PrintableChar,
                   "printable characters (no control characters)");
}
absl::Status ValidateCollectionName(absl::string_view name) {
  return CheckName(name, "collection name", kMaxCollectionName, PrintableChar,
                   "printable characters (no control characters)");
}

absl::Status ValidateStep(uint64_t step, absl::string_view what) {
  if (step >= kMaxStep) {
    return MakeError(Reason::kBadRequest,
                     absl::StrCat(what, " ", static_cast<int64_t>(step),
                                  " is out of range: steps are integers from 0 to 2^62-1 "
                                  "(a negative step?)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMode(int mode, bool allow_unspecified) {
  if ((mode >= 1 && mode <= 4) || (allow_unspecified && mode == 0)) return absl::OkStatus();
  return MakeError(
      Reason::kBadRequest,
      absl::StrCat("unknown mode ", mode, ": use TRAIN (1), EVAL (2), PREDICT (3) or GLOBAL (4)"));
}

absl::Status ValidateRegexes(const std::vector<std::string>& regexes) {
  if (regexes.size() > kMaxRegexes) {
    return MakeError(Reason::kBadRequest,
                     absl::StrCat(regexes.size(), " regexes in one request; the limit is ",
                                  kMaxRegexes, " (join them with |)"));
  }
  for (const std::string& r : regexes) {
    if (r.size() > kMaxRegexBytes) {
      return MakeError(Reason::kBadRequest,
                       absl::StrCat("regex ", QuoteInput(r), " is too long; the limit is ",
                                    kMaxRegexBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateReductionName(absl::string_view name) {
  if (name.size() > kMaxReductionNameBytes) {
    return MakeError(Reason::kBadRequest,
                     absl::StrCat("reduction name ", QuoteInput(name),
                                  " is too long; the limit is ", kMaxReductionNameBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace tensorkeep
