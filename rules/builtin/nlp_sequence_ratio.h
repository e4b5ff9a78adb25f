// NLPSequenceRatio: fires when given tokens (e.g. padding) make up too much
// of the input sequences.
//
// Parameters (strings):
//   tensor_regex              (default ".*embedding0_input_0") the input
//                             sequences (token ids), comma-separated regexes.
//   token_values              (default "0") comma-separated token ids.
//   token_thresholds_percent  (default "50") comma-separated percentages, one
//                             per token value (or one for all).
// Fires at a step when, in a matching tensor saved there, the share of
// elements equal to token_values[i] exceeds token_thresholds_percent[i].
// Counts with a server-side histogram per token (one bin of width 1 centred
// on the token id, which counts exactly the elements equal to it when the ids
// are integers); no raw values.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_NLP_SEQUENCE_RATIO_H_
#define TENSORKEEP_RULES_BUILTIN_NLP_SEQUENCE_RATIO_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

class NLPSequenceRatio : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  NLPSequenceRatio(client::Trial base_trial, TensorSelection inputs, std::vector<double> tokens,
                   std::vector<double> thresholds);

  const TensorSelection inputs_;
  const std::vector<double> tokens_;
  const std::vector<double> thresholds_;  // same size as tokens_
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_NLP_SEQUENCE_RATIO_H_
