#include "rules/rule.h"

#include "base/status_macros.h"

namespace tensorkeep {
namespace rules {

Rule::Rule(std::string name, client::Trial base_trial, std::vector<client::Trial> other_trials)
    : name_(std::move(name)),
      base_trial_(std::move(base_trial)),
      other_trials_(std::move(other_trials)) {}

absl::StatusOr<bool> Rule::InvokeWhenIdle(absl::Duration /*idle*/,
                                          std::optional<uint64_t> /*last_step*/) {
  return false;
}

void Rule::NoteStep(const StepInfo& info) {
  StepInfo& noted = steps_[info.step];
  noted = info;
  // A step without a mode is addressed by its global step.
  if (noted.mode == client::kGlobal) noted.mode_step = noted.step;
  while (steps_.size() > kMaxNotedSteps) steps_.erase(steps_.begin());
}

bool Rule::Fire(std::string message) {
  message_ = std::move(message);
  return true;
}

absl::StatusOr<StepInfo> Rule::LookupStep(uint64_t step) {
  auto it = steps_.find(step);
  if (it != steps_.end()) return it->second;
  StepInfo info;
  info.step = step;
  TK_ASSIGN_OR_RETURN(info.mode, base_trial_.ModeOf(step));
  TK_ASSIGN_OR_RETURN(info.mode_step, base_trial_.ModeStep(step));
  if (info.mode == client::kGlobal) info.mode_step = step;
  NoteStep(info);
  return info;
}

}  // namespace rules
}  // namespace tensorkeep
