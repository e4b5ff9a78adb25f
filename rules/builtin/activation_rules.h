// The rules on activations: SaturatedActivation and DeadRelu. Both count, per
// layer, the share of values in a range with one server-side histogram call
// (one bin over the range; values outside it are counted apart), so no raw
// values travel.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_ACTIVATION_RULES_H_
#define TENSORKEEP_RULES_BUILTIN_ACTIVATION_RULES_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

// SaturatedActivation: fires when many tanh or sigmoid layers saturate.
//
// Parameters (strings):
//   tensor_regex         (default ".*tanh_input, .*sigmoid_input") the inputs
//                        of the activations; a tensor whose name contains
//                        "tanh" uses threshold_tanh, one that contains
//                        "sigmoid" threshold_sigmoid (case-insensitive);
//                        others are not judged.
//   threshold_tanh       (default "(-9.4999, 9.4999)") the non-saturated
//                        range of tanh inputs.
//   threshold_sigmoid    (default "(-23, 16.99999)") the same for sigmoid.
//   threshold_inactivity (default 1.0) percentage of a layer's values outside
//                        its range above which the layer is saturated.
//   threshold_layer      (default 50.0) percentage of saturated layers above
//                        which the rule fires.
// Fires at a step when more than threshold_layer % of the judged layers
// saved there have more than threshold_inactivity % of their values outside
// the range (NaNs count as values, not as saturated).
class SaturatedActivation : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    std::pair<double, double> tanh;
    std::pair<double, double> sigmoid;
    double threshold_inactivity;
    double threshold_layer;
  };
  SaturatedActivation(client::Trial base_trial, TensorSelection selection, Options options);

  const TensorSelection selection_;
  const Options options_;
};

// DeadRelu: fires when many ReLU layers are dead.
//
// Parameters (strings):
//   tensor_regex         (default ".*relu_output") the ReLU outputs.
//   threshold_inactivity (default 1.0) a layer is dead when fewer than this
//                        percentage of its outputs are > 0 (SageMaker: "if
//                        the ReLU is active less than threshold_inactivity, it
//                        is considered to be dead").
//   threshold_layer      (default 50.0) percentage of dead layers above which
//                        the rule fires.
// Fires at a step when more than threshold_layer % of the ReLU outputs saved
// there are dead. (A value of -inf counts as active, which ReLU outputs
// never hold.)
class DeadRelu : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  DeadRelu(client::Trial base_trial, TensorSelection selection, double threshold_inactivity,
           double threshold_layer);

  const TensorSelection selection_;
  const double threshold_inactivity_;
  const double threshold_layer_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_ACTIVATION_RULES_H_
