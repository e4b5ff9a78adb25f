// TensorVariance: fires when the variance of a tensor leaves a given range.
//
// Parameters (strings):
//   collection_names  (default none) comma-separated collections to check.
//   tensor_regex      (default none) comma-separated regexes of tensors.
//                     With neither, every tensor is checked.
//   max_threshold     (default None: unchecked) largest healthy variance.
//   min_threshold     (default None: unchecked) smallest healthy variance.
//                     At least one of the two thresholds is required.
// Fires at a step when a selected tensor saved there has a variance (the
// population variance, ddof 0) > max_threshold or < min_threshold. Reads one
// server-side reduction per tensor; no raw values.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_TENSOR_VARIANCE_H_
#define TENSORKEEP_RULES_BUILTIN_TENSOR_VARIANCE_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

class TensorVariance : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  TensorVariance(client::Trial base_trial, TensorSelection selection,
                 std::optional<double> min_threshold, std::optional<double> max_threshold);

  const TensorSelection selection_;
  const std::optional<double> min_threshold_;
  const std::optional<double> max_threshold_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_TENSOR_VARIANCE_H_
