#include "rules/registry.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "rules/builtin/activation_rules.h"
#include "rules/builtin/all_zero.h"
#include "rules/builtin/check_input_images.h"
#include "rules/builtin/classification_rules.h"
#include "rules/builtin/exploding_tensor.h"
#include "rules/builtin/loss_rules.h"
#include "rules/builtin/nlp_sequence_ratio.h"
#include "rules/builtin/poor_weight_initialization.h"
#include "rules/builtin/similar_across_runs.h"
#include "rules/builtin/stalled_training.h"
#include "rules/builtin/tensor_variance.h"
#include "rules/builtin/unchanged_tensor.h"
#include "rules/builtin/vanishing_gradient.h"
#include "rules/builtin/weight_update_ratio.h"
#include "rules/params.h"

namespace tensorkeep {
namespace rules {
namespace {

using Factory = std::function<absl::StatusOr<std::unique_ptr<Rule>>(
    client::Trial, std::vector<client::Trial>, RuleParams&)>;

struct Entry {
  BuiltinRuleInfo info;
  Factory create;
};

const std::vector<Entry>& Entries() {
  static const auto* entries = new std::vector<Entry>{
      {{"AllZero", "a tensor has >= threshold % zero values"}, &AllZero::Create},
      {{"CheckInputImages", "the mean of input images is far from 0 (not normalised)"},
       &CheckInputImages::Create},
      {{"ClassImbalance", "classes are imbalanced or a class is mostly mispredicted"},
       &ClassImbalance::Create},
      {{"Confusion", "the normalised confusion matrix is poor"}, &Confusion::Create},
      {{"DeadRelu", "more than threshold_layer % of ReLU layers are dead"}, &DeadRelu::Create},
      {{"ExplodingTensor", "a tensor has NaN (or infinite) values"}, &ExplodingTensor::Create},
      {{"LossNotDecreasing", "the loss did not decrease over num_steps steps"},
       &LossNotDecreasing::Create},
      {{"NLPSequenceRatio", "given tokens (padding) make up too much of the input sequences"},
       &NLPSequenceRatio::Create},
      {{"Overfit", "the validation loss runs away from the training loss"}, &Overfit::Create},
      {{"Overtraining", "neither training nor validation loss improves any more"},
       &Overtraining::Create},
      {{"PoorWeightInitialization", "the first training steps show a poor initialisation"},
       &PoorWeightInitialization::Create},
      {{"SaturatedActivation", "more than threshold_layer % of tanh/sigmoid layers saturate"},
       &SaturatedActivation::Create},
      {{"SimilarAcrossRuns", "tensors differ from another trial's at the same step"},
       &SimilarAcrossRuns::Create},
      {{"StalledTrainingRule", "no new step for threshold seconds"}, &StalledTrainingRule::Create},
      {{"TensorVariance", "a tensor's variance is outside [min_threshold, max_threshold]"},
       &TensorVariance::Create},
      {{"UnchangedTensor", "a tensor did not change over num_steps saved steps"},
       &UnchangedTensor::Create},
      {{"VanishingGradient", "the mean |gradient| of a gradient is below threshold"},
       &VanishingGradient::Create},
      {{"WeightUpdateRatio", "weights update too much or too little between steps"},
       &WeightUpdateRatio::Create},
  };
  return *entries;
}

}  // namespace

const std::vector<BuiltinRuleInfo>& BuiltinRules() {
  static const auto* infos = [] {
    auto* v = new std::vector<BuiltinRuleInfo>;
    for (const Entry& e : Entries()) v->push_back(e.info);
    return v;
  }();
  return *infos;
}

absl::StatusOr<std::unique_ptr<Rule>> CreateRule(const std::string& name,
                                                 const std::map<std::string, std::string>& params,
                                                 client::Trial base_trial,
                                                 std::vector<client::Trial> other_trials) {
  for (const Entry& e : Entries()) {
    if (e.info.name != name) continue;
    RuleParams reader(name, params);
    TK_ASSIGN_OR_RETURN(std::unique_ptr<Rule> rule,
                        e.create(std::move(base_trial), std::move(other_trials), reader));
    TK_RETURN_IF_ERROR(reader.Finish());
    return rule;
  }
  std::vector<std::string> names;
  for (const Entry& e : Entries()) names.push_back(e.info.name);
  return absl::NotFoundError(absl::StrCat(
      "unknown rule '", name, "'; the built-in rules are: ", absl::StrJoin(names, ", ")));
}

}  // namespace rules
}  // namespace tensorkeep
