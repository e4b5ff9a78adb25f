#include "rules/builtin/stalled_training.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> StalledTrainingRule::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  TK_ASSIGN_OR_RETURN(double threshold, params.Double("threshold", 1800.0));
  if (!(threshold > 0)) return params.Invalid("threshold", "must be a positive number of seconds");
  TK_ASSIGN_OR_RETURN(bool stop, params.Bool("stop_training_on_fire", false));
  return std::unique_ptr<Rule>(
      new StalledTrainingRule(std::move(base_trial), absl::Seconds(threshold), stop));
}

StalledTrainingRule::StalledTrainingRule(client::Trial base_trial, absl::Duration threshold,
                                         bool stop_training_on_fire)
    : Rule("StalledTrainingRule", std::move(base_trial)),
      threshold_(threshold),
      stop_training_on_fire_(stop_training_on_fire) {}

absl::StatusOr<bool> StalledTrainingRule::InvokeAtStep(uint64_t /*step*/) { return false; }

absl::StatusOr<bool> StalledTrainingRule::InvokeWhenIdle(absl::Duration idle,
                                                         std::optional<uint64_t> last_step) {
  if (idle < threshold_) return false;
  return Fire(absl::StrCat(
      absl::StrFormat("no new step for %.1f s (threshold %g s)", absl::ToDoubleSeconds(idle),
                      absl::ToDoubleSeconds(threshold_)),
      last_step.has_value() ? absl::StrCat("; last step ", *last_step) : "; no step yet"));
}

}  // namespace rules
}  // namespace tensorkeep
