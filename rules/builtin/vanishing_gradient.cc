#include "rules/builtin/vanishing_gradient.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> VanishingGradient::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  TK_ASSIGN_OR_RETURN(double threshold, params.Double("threshold", 1e-7));
  return std::unique_ptr<Rule>(new VanishingGradient(std::move(base_trial), threshold));
}

VanishingGradient::VanishingGradient(client::Trial base_trial, double threshold)
    : Rule("VanishingGradient", std::move(base_trial)), threshold_(threshold) {}

absl::StatusOr<bool> VanishingGradient::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(auto names, base_trial().TensorNames(step, client::kGlobal, {}, "gradients"));
  if (names.empty()) return NothingAtStep("collection gradients", step);
  size_t checked = 0;
  for (const std::string& name : names) {
    absl::StatusOr<double> r =
        base_trial().tensor(name).ReductionValue(step, "mean", client::kGlobal, "", /*abs=*/true);
    if (!r.ok()) {
      if (IsMissing(r.status())) continue;  // saved without mean(|x|) nor the value
      return r.status();
    }
    ++checked;
    double mean = *r;
    if (mean < threshold_) {
      return Fire(absl::StrCat("mean(|", name, "|) = ", mean, " < threshold ", threshold_,
                               " at step ", step));
    }
  }
  if (checked == 0) return NothingAtStep("collection gradients", step);
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
