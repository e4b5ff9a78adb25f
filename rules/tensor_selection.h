// TensorSelection: which tensors a rule looks at, by collection names and
// regexes (smdebug's collection_names / tensor_regex parameters), resolved
// at each step against the trial's index.
//
// Thread safety: immutable after construction; thread-safe.
#ifndef TENSORKEEP_RULES_TENSOR_SELECTION_H_
#define TENSORKEEP_RULES_TENSOR_SELECTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/trial.h"

namespace tensorkeep {
namespace rules {

class TensorSelection {
 public:
  // Tensors in any of `collections` or matching any of `regexes` (anchored
  // at the start, as Python's re.match). With both empty: every tensor when
  // `all_when_empty`, none otherwise.
  TensorSelection(std::vector<std::string> collections, std::vector<std::string> regexes,
                  bool all_when_empty = true);

  // The selected tensors saved at global step `step`, sorted, without
  // duplicates (one index query per collection, one for all regexes).
  absl::StatusOr<std::vector<std::string>> NamesAt(const client::Trial& trial, uint64_t step) const;

  // "collections a, b; regex x" for messages.
  std::string Describe() const;
  bool empty() const { return collections_.empty() && regexes_.empty(); }

 private:
  std::vector<std::string> collections_;
  std::vector<std::string> regexes_;
  bool all_when_empty_;
};

// True for the errors that mean "not saved here" (TensorUnavailableForStep,
// StepUnavailable, TensorUnavailable): a rule skips that tensor or step.
bool IsMissing(const absl::Status& status);

// A TensorUnavailableForStep error saying that no tensor of `what` was saved at
// `step`, so that InvokeRule skips the step.
absl::Status NothingAtStep(const std::string& what, uint64_t step);

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_TENSOR_SELECTION_H_
