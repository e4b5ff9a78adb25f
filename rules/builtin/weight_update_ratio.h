// WeightUpdateRatio: fires when weights update too much or too little
// between training steps.
//
// Parameters (strings):
//   num_steps        (default None) compare with the newest saved step at
//                    least num_steps mode steps back; None: the previous
//                    saved step.
//   large_threshold  (default 10) the largest healthy update ratio.
//   small_threshold  (default 1e-8) the smallest healthy update ratio.
//   epsilon          (default 1e-9) added to the norm of the old weights.
// Evaluated at TRAIN steps (GLOBAL steps for a trial without modes). For
// each tensor of the `weights` collection saved at the step (w) and at the
// step compared with (w_prev): ratio = ||w - w_prev||_2 /
// (||w_prev||_2 + epsilon). Fires when ratio > large_threshold or
// ratio < small_threshold. Reads raw values; the value at the current step
// is kept for the next comparison.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_WEIGHT_UPDATE_RATIO_H_
#define TENSORKEEP_RULES_BUILTIN_WEIGHT_UPDATE_RATIO_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"

namespace tensorkeep {
namespace rules {

class WeightUpdateRatio : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    std::optional<uint64_t> num_steps;
    double large_threshold;
    double small_threshold;
    double epsilon;
  };
  // A value kept for the next comparison.
  struct Kept {
    int mode = 0;
    uint64_t mode_step = 0;
    std::vector<double> values;
  };
  WeightUpdateRatio(client::Trial base_trial, Options options);
  // The value of `name` at (mode, s), from the kept one if it is that.
  absl::StatusOr<std::vector<double>> ValueAt(const std::string& name, int mode, uint64_t s);

  const Options options_;
  std::map<std::string, Kept> kept_;  // by tensor
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_WEIGHT_UPDATE_RATIO_H_
