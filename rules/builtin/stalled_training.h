// StalledTrainingRule: fires when training stops making progress — no new
// step completes for a while.
//
// Parameters (strings):
//   threshold              (default 1800) seconds without a new complete step.
//   stop_training_on_fire  (default False) when True, the rule worker reports
//                          its issue with the "stop" action.
// Watches time, not tensors: every complete step resets the clock (which
// starts when the invocation starts); when threshold seconds pass without
// one, the rule fires (at the last step seen), and the clock starts again.
// Nothing fires after the trial ended.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_STALLED_TRAINING_H_
#define TENSORKEEP_RULES_BUILTIN_STALLED_TRAINING_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rules/params.h"
#include "rules/rule.h"

namespace tensorkeep {
namespace rules {

class StalledTrainingRule : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  // A new step: never an issue.
  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;
  std::optional<absl::Duration> IdleTimeout() const override { return threshold_; }
  absl::StatusOr<bool> InvokeWhenIdle(absl::Duration idle,
                                      std::optional<uint64_t> last_step) override;
  bool StopTrainingOnFire() const override { return stop_training_on_fire_; }

 private:
  StalledTrainingRule(client::Trial base_trial, absl::Duration threshold,
                      bool stop_training_on_fire);

  const absl::Duration threshold_;
  const bool stop_training_on_fire_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_STALLED_TRAINING_H_
