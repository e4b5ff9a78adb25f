// PoorWeightInitialization: fires when the first training steps show a badly
// initialised network.
//
// Parameters (strings):
//   activation_inputs_regex  (default ".*relu_input") the inputs of the
//                            activation layers (comma-separated regexes).
//   threshold                (default 10.0) the largest healthy ratio of the
//                            largest to the smallest variance of activation
//                            inputs across layers.
//   distribution_range       (default 0.001) the smallest healthy spread
//                            between the 5th and 95th percentiles of the
//                            gradients.
//   patience                 (default 5) saved steps the loss may go without
//                            a new minimum.
//   steps                    (default 10) how many first TRAIN steps (mode
//                            steps; global steps for a trial without modes)
//                            the rule looks at.
// Evaluated at TRAIN steps with mode step < `steps`; later steps are skipped.
// Fires at such a step when any of:
//   - at least two activation inputs were saved there and
//     max variance / min variance > threshold;
//   - gradients (the `gradients` collection) were saved there and the 95th
//     minus the 5th percentile of all their values together is
//     < distribution_range;
//   - a loss (the `losses` collection) went `patience` saved steps in a row
//     without going below its lowest value so far.
// Variances are server-side reductions; percentiles read the raw gradients
// (during the first `steps` steps only).
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_POOR_WEIGHT_INITIALIZATION_H_
#define TENSORKEEP_RULES_BUILTIN_POOR_WEIGHT_INITIALIZATION_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

class PoorWeightInitialization : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    double threshold;
    double distribution_range;
    int64_t patience;
    uint64_t steps;
  };
  // The lowest loss so far and the saved steps since it was reached.
  struct LossProgress {
    double best = 0;
    int64_t since_best = 0;
  };
  PoorWeightInitialization(client::Trial base_trial, TensorSelection activation_inputs,
                           Options options);
  // Each check: OK(true) fired, OK(false) healthy or nothing to check (then
  // `checked` is left alone).
  absl::StatusOr<bool> CheckActivationVariance(uint64_t step, bool& checked);
  absl::StatusOr<bool> CheckGradientSpread(uint64_t step, bool& checked);
  absl::StatusOr<bool> CheckLoss(uint64_t step, bool& checked);

  const TensorSelection activation_inputs_;
  const Options options_;
  std::map<std::string, LossProgress> losses_;  // by tensor
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_POOR_WEIGHT_INITIALIZATION_H_
