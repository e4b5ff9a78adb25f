// VanishingGradient: fires when the mean of the absolute values of a gradient
// falls below a threshold.
//
// Parameters (strings):
//   threshold   (default 1e-7) the smallest healthy mean |gradient|.
// Tensors: the `gradients` collection, at each step where any was saved.
// Fires at a step when mean(|g|) < threshold for any gradient g saved there.
// Reads one server-side reduction per gradient; no raw values.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_VANISHING_GRADIENT_H_
#define TENSORKEEP_RULES_BUILTIN_VANISHING_GRADIENT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"

namespace tensorkeep {
namespace rules {

class VanishingGradient : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  VanishingGradient(client::Trial base_trial, double threshold);

  const double threshold_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_VANISHING_GRADIENT_H_
