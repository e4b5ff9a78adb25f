// AllZero: fires when (nearly) all the values of a tensor are zero.
//
// Parameters (strings):
//   collection_names  comma-separated collections to check;
//   tensor_regex      comma-separated regexes of tensors; at least one of the
//                     two is required.
//   threshold         (default 100) percentage of zero values at or above
//                     which a tensor fires.
// Fires at a step when a selected tensor saved there has >= threshold % zero
// values. With threshold 100 it reads one server-side reduction per tensor
// (max of |x| == 0); below 100 it must count zeros in the raw values.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_ALL_ZERO_H_
#define TENSORKEEP_RULES_BUILTIN_ALL_ZERO_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

class AllZero : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  AllZero(client::Trial base_trial, TensorSelection selection, double threshold);
  // The percentage of zeros of tensor `name` at `step`.
  absl::StatusOr<double> ZeroPercent(const std::string& name, uint64_t step);

  const TensorSelection selection_;
  const double threshold_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_ALL_ZERO_H_
