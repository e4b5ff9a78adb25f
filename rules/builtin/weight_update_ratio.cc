#include "rules/builtin/weight_update_ratio.h"

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "rules/tensor_selection.h"
#include "rules/value_math.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> WeightUpdateRatio::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  Options o;
  TK_ASSIGN_OR_RETURN(std::optional<int64_t> num_steps, params.OptionalInt("num_steps"));
  if (num_steps.has_value()) {
    if (*num_steps < 1) return params.Invalid("num_steps", "must be at least 1 (or None)");
    o.num_steps = static_cast<uint64_t>(*num_steps);
  }
  TK_ASSIGN_OR_RETURN(o.large_threshold, params.Double("large_threshold", 10.0));
  TK_ASSIGN_OR_RETURN(o.small_threshold, params.Double("small_threshold", 1e-8));
  TK_ASSIGN_OR_RETURN(o.epsilon, params.Double("epsilon", 1e-9));
  if (o.small_threshold > o.large_threshold) {
    return params.Invalid("small_threshold", "must not exceed large_threshold");
  }
  if (o.epsilon < 0) return params.Invalid("epsilon", "must not be negative");
  return std::unique_ptr<Rule>(new WeightUpdateRatio(std::move(base_trial), o));
}

WeightUpdateRatio::WeightUpdateRatio(client::Trial base_trial, Options options)
    : Rule("WeightUpdateRatio", std::move(base_trial)), options_(options) {}

absl::StatusOr<std::vector<double>> WeightUpdateRatio::ValueAt(const std::string& name, int mode,
                                                               uint64_t s) {
  auto it = kept_.find(name);
  if (it != kept_.end() && it->second.mode == mode && it->second.mode_step == s) {
    return it->second.values;
  }
  TK_ASSIGN_OR_RETURN(client::Value value, base_trial().tensor(name).GetValue(s, mode));
  return ToDoubles(value);
}

absl::StatusOr<bool> WeightUpdateRatio::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(StepInfo info, LookupStep(step));
  if (info.mode != client::kTrain && info.mode != client::kGlobal) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("step ", step, " is not a TRAIN step"));
  }
  TK_ASSIGN_OR_RETURN(auto names, base_trial().TensorNames(step, client::kGlobal, {}, "weights"));
  if (names.empty()) return NothingAtStep("collection weights", step);
  const uint64_t s = info.mode_step;
  const uint64_t back = options_.num_steps.value_or(1);
  if (s < back) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("no weights saved ", back, " steps before step ", step));
  }
  size_t checked = 0;
  std::optional<std::string> issue;
  for (const std::string& name : names) {
    client::Tensor tensor = base_trial().tensor(name);
    TK_ASSIGN_OR_RETURN(std::vector<uint64_t> prev, tensor.PrevSteps(s - back, 1, info.mode));
    absl::StatusOr<std::vector<double>> now = ValueAt(name, info.mode, s);
    if (!now.ok()) {
      if (IsMissing(now.status())) continue;
      return now.status();
    }
    std::vector<double> current = std::move(*now);
    bool judged = false;
    if (!prev.empty()) {
      absl::StatusOr<std::vector<double>> before = ValueAt(name, info.mode, prev[0]);
      if (!before.ok() && !IsMissing(before.status())) return before.status();
      if (before.ok() && before->size() == current.size()) {
        judged = true;
        double ratio = L2Distance(current, *before) / (L2Norm(*before) + options_.epsilon);
        if (!issue.has_value() && ratio > options_.large_threshold) {
          issue = absl::StrCat("update ratio of ", name, " at step ", step, " = ", ratio,
                               " > large_threshold ", options_.large_threshold);
        } else if (!issue.has_value() && ratio < options_.small_threshold) {
          issue = absl::StrCat("update ratio of ", name, " at step ", step, " = ", ratio,
                               " < small_threshold ", options_.small_threshold);
        }
      }
    }
    kept_[name] = Kept{info.mode, s, std::move(current)};
    if (judged) ++checked;
  }
  if (issue.has_value()) return Fire(*issue);
  if (checked == 0) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("no earlier weights to compare with at step ", step));
  }
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
