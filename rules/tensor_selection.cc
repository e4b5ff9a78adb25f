#include "rules/tensor_selection.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/errors.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace rules {

TensorSelection::TensorSelection(std::vector<std::string> collections,
                                 std::vector<std::string> regexes, bool all_when_empty)
    : collections_(std::move(collections)),
      regexes_(std::move(regexes)),
      all_when_empty_(all_when_empty) {}

absl::StatusOr<std::vector<std::string>> TensorSelection::NamesAt(const client::Trial& trial,
                                                                  uint64_t step) const {
  std::vector<std::string> out;
  if (empty()) {
    if (!all_when_empty_) return out;
    return trial.TensorNames(step, client::kGlobal);
  }
  for (const std::string& c : collections_) {
    TK_ASSIGN_OR_RETURN(auto names, trial.TensorNames(step, client::kGlobal, {}, c));
    out.insert(out.end(), names.begin(), names.end());
  }
  if (!regexes_.empty()) {
    TK_ASSIGN_OR_RETURN(auto names, trial.TensorNames(step, client::kGlobal, regexes_));
    out.insert(out.end(), names.begin(), names.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string TensorSelection::Describe() const {
  if (empty()) return all_when_empty_ ? "all tensors" : "no tensors";
  std::vector<std::string> parts;
  if (!collections_.empty()) {
    parts.push_back(absl::StrCat(collections_.size() > 1 ? "collections " : "collection ",
                                 absl::StrJoin(collections_, ", ")));
  }
  if (!regexes_.empty()) {
    parts.push_back(
        absl::StrCat(regexes_.size() > 1 ? "regexes " : "regex ", absl::StrJoin(regexes_, ", ")));
  }
  return absl::StrJoin(parts, " or ");
}

bool IsMissing(const absl::Status& status) {
  Reason r = GetReason(status);
  return r == Reason::kTensorUnavailableForStep || r == Reason::kStepUnavailable ||
         r == Reason::kTensorUnavailable;
}

absl::Status NothingAtStep(const std::string& what, uint64_t step) {
  return MakeError(Reason::kTensorUnavailableForStep,
                   absl::StrCat("no tensor of ", what, " was saved at step ", step));
}

}  // namespace rules
}  // namespace tensorkeep
