#include "rules/builtin/tensor_variance.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> TensorVariance::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("tensor_regex"));
  TensorSelection selection(params.List("collection_names"), std::move(regexes));
  TK_ASSIGN_OR_RETURN(std::optional<double> max_threshold, params.OptionalDouble("max_threshold"));
  TK_ASSIGN_OR_RETURN(std::optional<double> min_threshold, params.OptionalDouble("min_threshold"));
  if (!max_threshold.has_value() && !min_threshold.has_value()) {
    return params.Invalid("max_threshold", "TensorVariance needs max_threshold or min_threshold");
  }
  if (max_threshold.has_value() && min_threshold.has_value() && *min_threshold > *max_threshold) {
    return params.Invalid("min_threshold", "must not exceed max_threshold");
  }
  return std::unique_ptr<Rule>(new TensorVariance(std::move(base_trial), std::move(selection),
                                                  min_threshold, max_threshold));
}

TensorVariance::TensorVariance(client::Trial base_trial, TensorSelection selection,
                               std::optional<double> min_threshold,
                               std::optional<double> max_threshold)
    : Rule("TensorVariance", std::move(base_trial)),
      selection_(std::move(selection)),
      min_threshold_(min_threshold),
      max_threshold_(max_threshold) {}

absl::StatusOr<bool> TensorVariance::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(auto names, selection_.NamesAt(base_trial(), step));
  size_t checked = 0;
  for (const std::string& name : names) {
    absl::StatusOr<double> r = base_trial().tensor(name).ReductionValue(step, "variance");
    if (!r.ok()) {
      if (IsMissing(r.status())) continue;
      return r.status();
    }
    ++checked;
    double variance = *r;
    if (max_threshold_.has_value() && variance > *max_threshold_) {
      return Fire(absl::StrCat("variance of ", name, " = ", variance, " > max_threshold ",
                               *max_threshold_, " at step ", step));
    }
    if (min_threshold_.has_value() && variance < *min_threshold_) {
      return Fire(absl::StrCat("variance of ", name, " = ", variance, " < min_threshold ",
                               *min_threshold_, " at step ", step));
    }
  }
  if (checked == 0) return NothingAtStep(selection_.Describe(), step);
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
