#include "rules/builtin/similar_across_runs.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "rules/value_math.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> SimilarAcrossRuns::Create(
    client::Trial base_trial, std::vector<client::Trial> other_trials, RuleParams& params) {
  std::optional<std::string> other = params.OptionalString("other_trial");
  if (other.has_value()) {
    other_trials.insert(other_trials.begin(), client::Trial(base_trial.connection(), *other));
  }
  if (other_trials.empty()) {
    return params.Invalid("other_trial", "SimilarAcrossRuns needs a trial to compare with");
  }
  if (other_trials.front().name() == base_trial.name()) {
    return params.Invalid("other_trial", "is the base trial itself");
  }
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("tensor_regex"));
  TensorSelection selection(params.List("collection_names"), std::move(regexes));
  return std::unique_ptr<Rule>(new SimilarAcrossRuns(
      std::move(base_trial), {std::move(other_trials.front())}, std::move(selection)));
}

SimilarAcrossRuns::SimilarAcrossRuns(client::Trial base_trial,
                                     std::vector<client::Trial> other_trials,
                                     TensorSelection selection)
    : Rule("SimilarAcrossRuns", std::move(base_trial), std::move(other_trials)),
      selection_(std::move(selection)) {}

absl::StatusOr<bool> SimilarAcrossRuns::InvokeAtStep(uint64_t step) {
  const client::Trial& other = other_trials().front();
  // The other run may be behind: wait until it has passed this step.
  absl::Status waited = other.WaitForSteps({step});
  if (!waited.ok()) {
    Reason reason = GetReason(waited);
    if (reason == Reason::kStepUnavailable || reason == Reason::kNoMoreData) {
      return MakeError(Reason::kTensorUnavailableForStep,
                       absl::StrCat("trial ", other.name(), " did not save step ", step));
    }
    return waited;
  }
  TK_ASSIGN_OR_RETURN(auto names, selection_.NamesAt(base_trial(), step));
  size_t compared = 0;
  for (const std::string& name : names) {
    absl::StatusOr<client::Value> theirs = other.tensor(name).GetValue(step);
    if (!theirs.ok()) {
      // Not saved there (or the other trial has no such step).
      if (IsMissing(theirs.status())) continue;
      return theirs.status();
    }
    absl::StatusOr<client::Value> ours = base_trial().tensor(name).GetValue(step);
    if (!ours.ok()) {
      if (IsMissing(ours.status())) continue;
      return ours.status();
    }
    ++compared;
    if (ours->shape != theirs->shape) {
      return Fire(absl::StrCat(name, " has shape (", absl::StrJoin(ours->shape, ", "), ") in ",
                               base_trial().name(), " but (", absl::StrJoin(theirs->shape, ", "),
                               ") in ", other.name(), " at step ", step));
    }
    TK_ASSIGN_OR_RETURN(std::vector<double> a, ToDoubles(*ours));
    TK_ASSIGN_OR_RETURN(std::vector<double> b, ToDoubles(*theirs));
    if (!AllClose(a, b, 1e-5, 1e-8, /*equal_nan=*/true)) {
      return Fire(absl::StrCat(name, " differs between trials ", base_trial().name(), " and ",
                               other.name(), " at step ", step, " (||a - b|| = ", L2Distance(a, b),
                               ")"));
    }
  }
  if (compared == 0) {
    return NothingAtStep(absl::StrCat(selection_.Describe(), " in both trials"), step);
  }
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
