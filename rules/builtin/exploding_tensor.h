// ExplodingTensor: fires when a tensor holds a NaN (or an infinity).
//
// Parameters (strings):
//   collection_names  (default none) comma-separated collections to check.
//   tensor_regex      (default none) comma-separated regexes of tensors.
//                     With neither, every tensor is checked.
//   only_nan          (default False) when True, infinities do not fire.
// Fires at a step when a selected tensor saved there has a NaN value, or an
// infinite one unless only_nan. Reads one server-side reduction per tensor
// (max of |x|, which is NaN when any element is NaN and infinite when any is
// infinite); no raw values.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_EXPLODING_TENSOR_H_
#define TENSORKEEP_RULES_BUILTIN_EXPLODING_TENSOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

class ExplodingTensor : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  ExplodingTensor(client::Trial base_trial, TensorSelection selection, bool only_nan);

  const TensorSelection selection_;
  const bool only_nan_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_EXPLODING_TENSOR_H_
