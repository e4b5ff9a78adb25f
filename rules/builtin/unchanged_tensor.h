// UnchangedTensor: fires when a tensor stops changing across steps.
//
// Parameters (strings):
//   collection_names  (default none) comma-separated collections to check.
//   tensor_regex      (default none) comma-separated regexes of tensors.
//                     With neither, every tensor is checked.
//   num_steps         (default 3, >= 2) how many saved steps to compare.
//   rtol              (default 1e-5) relative tolerance of numpy.allclose.
//   atol              (default 1e-8) absolute tolerance of numpy.allclose.
//   equal_nan         (default False) whether NaNs compare equal.
// Fires at a step when, for a selected tensor saved there, the values at its
// last num_steps saved steps of the same mode (up to and including this one)
// are each allclose(rtol, atol, equal_nan) to the next. A tensor with fewer
// saved steps so far is not judged yet. Compares raw values; each value is
// fetched once and kept while it is in the window.
//
// Note: weights do not change in EVAL or PREDICT steps; select the tensors
// accordingly.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_UNCHANGED_TENSOR_H_
#define TENSORKEEP_RULES_BUILTIN_UNCHANGED_TENSOR_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

class UnchangedTensor : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    int64_t num_steps;
    double rtol;
    double atol;
    bool equal_nan;
  };
  UnchangedTensor(client::Trial base_trial, TensorSelection selection, Options options);
  // Whether `name` was unchanged over its window ending at (mode, mode_step);
  // TensorUnavailableForStep while it has too few saved steps.
  absl::StatusOr<bool> Unchanged(const std::string& name, int mode, uint64_t mode_step);

  const TensorSelection selection_;
  const Options options_;
  // Values in the current window, by tensor, then (mode, mode step).
  std::map<std::string, std::map<std::pair<int, uint64_t>, std::vector<double>>> cache_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_UNCHANGED_TENSOR_H_
