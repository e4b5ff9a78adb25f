#include "rules/builtin/all_zero.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "rules/value_math.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> AllZero::Create(client::Trial base_trial,
                                                      std::vector<client::Trial> /*other_trials*/,
                                                      RuleParams& params) {
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("tensor_regex"));
  TensorSelection selection(params.List("collection_names"), std::move(regexes),
                            /*all_when_empty=*/false);
  if (selection.empty()) {
    return params.Invalid("collection_names",
                          "AllZero needs collection_names or tensor_regex (or both)");
  }
  TK_ASSIGN_OR_RETURN(double threshold, params.Double("threshold", 100.0));
  if (!(threshold >= 0 && threshold <= 100)) {
    return params.Invalid("threshold", "must be a percentage in [0, 100]");
  }
  return std::unique_ptr<Rule>(new AllZero(std::move(base_trial), std::move(selection), threshold));
}

AllZero::AllZero(client::Trial base_trial, TensorSelection selection, double threshold)
    : Rule("AllZero", std::move(base_trial)),
      selection_(std::move(selection)),
      threshold_(threshold) {}

absl::StatusOr<double> AllZero::ZeroPercent(const std::string& name, uint64_t step) {
  client::Tensor tensor = base_trial().tensor(name);
  if (threshold_ >= 100.0) {
    // All zero <=> max |x| == 0 (NaN compares unequal, as a NaN is not zero).
    TK_ASSIGN_OR_RETURN(double max_abs,
                        tensor.ReductionValue(step, "max", client::kGlobal, "", /*abs=*/true));
    return max_abs == 0.0 ? 100.0 : 0.0;
  }
  TK_ASSIGN_OR_RETURN(client::Value value, tensor.GetValue(step));
  TK_ASSIGN_OR_RETURN(std::vector<double> v, ToDoubles(value));
  if (v.empty()) return 0.0;
  size_t zeros = 0;
  for (double x : v) zeros += (x == 0.0);
  return 100.0 * static_cast<double>(zeros) / static_cast<double>(v.size());
}

absl::StatusOr<bool> AllZero::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(auto names, selection_.NamesAt(base_trial(), step));
  size_t checked = 0;
  for (const std::string& name : names) {
    absl::StatusOr<double> percent = ZeroPercent(name, step);
    if (!percent.ok()) {
      if (IsMissing(percent.status())) continue;
      return percent.status();
    }
    ++checked;
    if (*percent >= threshold_) {
      return Fire(absl::StrCat(name, " has ", *percent, " % zero values at step ", step,
                               " (threshold ", threshold_, " %)"));
    }
  }
  if (checked == 0) return NothingAtStep(selection_.Describe(), step);
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
