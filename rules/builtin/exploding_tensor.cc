#include "rules/builtin/exploding_tensor.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> ExplodingTensor::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("tensor_regex"));
  TensorSelection selection(params.List("collection_names"), std::move(regexes));
  TK_ASSIGN_OR_RETURN(bool only_nan, params.Bool("only_nan", false));
  return std::unique_ptr<Rule>(
      new ExplodingTensor(std::move(base_trial), std::move(selection), only_nan));
}

ExplodingTensor::ExplodingTensor(client::Trial base_trial, TensorSelection selection, bool only_nan)
    : Rule("ExplodingTensor", std::move(base_trial)),
      selection_(std::move(selection)),
      only_nan_(only_nan) {}

absl::StatusOr<bool> ExplodingTensor::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(auto names, selection_.NamesAt(base_trial(), step));
  if (names.empty()) return NothingAtStep(selection_.Describe(), step);
  size_t checked = 0;
  for (const std::string& name : names) {
    absl::StatusOr<double> r =
        base_trial().tensor(name).ReductionValue(step, "max", client::kGlobal, "", /*abs=*/true);
    if (!r.ok()) {
      if (IsMissing(r.status())) continue;  // e.g. saved without max(|x|) nor the value
      return r.status();
    }
    ++checked;
    double max_abs = *r;
    if (std::isnan(max_abs)) {
      return Fire(absl::StrCat(name, " has NaN values at step ", step));
    }
    if (!only_nan_ && std::isinf(max_abs)) {
      return Fire(absl::StrCat(name, " has infinite values at step ", step));
    }
  }
  if (checked == 0) return NothingAtStep(selection_.Describe(), step);
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
