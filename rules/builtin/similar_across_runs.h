// SimilarAcrossRuns: fires when tensors of two trials differ at the same step.
//
// Parameters (strings):
//   other_trial       the name of the trial to compare with, on the same
//                     collector; required unless the rule is given other
//                     trials (the rule worker's --other-trial), in which case
//                     the first is used.
//   collection_names  (default none) comma-separated collections to compare.
//   tensor_regex      (default none) comma-separated regexes of tensors.
//                     With neither, every tensor is compared.
// Fires at a step when a selected tensor saved at that global step in both
// trials has values that are not numpy.allclose (rtol 1e-5, atol 1e-8; NaNs
// equal) or shapes that differ. Tensors the other trial did not save at the
// step are not compared; when the other trial is still running behind the
// base trial, the rule waits until it has passed the step. Reads raw values
// of both trials.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_SIMILAR_ACROSS_RUNS_H_
#define TENSORKEEP_RULES_BUILTIN_SIMILAR_ACROSS_RUNS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

class SimilarAcrossRuns : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  SimilarAcrossRuns(client::Trial base_trial, std::vector<client::Trial> other_trials,
                    TensorSelection selection);

  const TensorSelection selection_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_SIMILAR_ACROSS_RUNS_H_
