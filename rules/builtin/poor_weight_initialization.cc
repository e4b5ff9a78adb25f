#include "rules/builtin/poor_weight_initialization.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "rules/value_math.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> PoorWeightInitialization::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("activation_inputs_regex", {".*relu_input"}));
  Options o;
  TK_ASSIGN_OR_RETURN(o.threshold, params.Double("threshold", 10.0));
  if (!(o.threshold >= 1)) return params.Invalid("threshold", "must be at least 1");
  TK_ASSIGN_OR_RETURN(o.distribution_range, params.Double("distribution_range", 0.001));
  if (o.distribution_range < 0) {
    return params.Invalid("distribution_range", "must not be negative");
  }
  TK_ASSIGN_OR_RETURN(o.patience, params.Int("patience", 5));
  if (o.patience < 1) return params.Invalid("patience", "must be at least 1");
  TK_ASSIGN_OR_RETURN(int64_t steps, params.Int("steps", 10));
  if (steps < 1) return params.Invalid("steps", "must be at least 1");
  o.steps = static_cast<uint64_t>(steps);
  return std::unique_ptr<Rule>(new PoorWeightInitialization(
      std::move(base_trial), TensorSelection({}, std::move(regexes)), o));
}

PoorWeightInitialization::PoorWeightInitialization(client::Trial base_trial,
                                                   TensorSelection activation_inputs,
                                                   Options options)
    : Rule("PoorWeightInitialization", std::move(base_trial)),
      activation_inputs_(std::move(activation_inputs)),
      options_(options) {}

absl::StatusOr<bool> PoorWeightInitialization::CheckActivationVariance(uint64_t step,
                                                                       bool& checked) {
  TK_ASSIGN_OR_RETURN(auto names, activation_inputs_.NamesAt(base_trial(), step));
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  std::string lo_name, hi_name;
  size_t layers = 0;
  for (const std::string& name : names) {
    auto v = base_trial().tensor(name).ReductionValue(step, "variance");
    if (!v.ok()) {
      if (IsMissing(v.status())) continue;
      return v.status();
    }
    ++layers;
    if (*v < lo) lo = *v, lo_name = name;
    if (*v > hi) hi = *v, hi_name = name;
  }
  if (layers < 2) return false;
  checked = true;
  double ratio = lo > 0 ? hi / lo : (hi > 0 ? std::numeric_limits<double>::infinity() : 1.0);
  if (ratio > options_.threshold) {
    return Fire(absl::StrCat("activation inputs vary too much across layers at step ", step,
                             ": variance of ", hi_name, " = ", hi, ", of ", lo_name, " = ", lo,
                             " (ratio ", ratio, " > threshold ", options_.threshold, ")"));
  }
  return false;
}

absl::StatusOr<bool> PoorWeightInitialization::CheckGradientSpread(uint64_t step, bool& checked) {
  TK_ASSIGN_OR_RETURN(auto names, base_trial().TensorNames(step, client::kGlobal, {}, "gradients"));
  std::vector<double> all;
  for (const std::string& name : names) {
    auto value = base_trial().tensor(name).GetValue(step);
    if (!value.ok()) {
      if (IsMissing(value.status())) continue;
      return value.status();
    }
    TK_ASSIGN_OR_RETURN(std::vector<double> v, ToDoubles(*value));
    all.insert(all.end(), v.begin(), v.end());
  }
  if (all.empty()) return false;
  checked = true;
  std::vector<double> copy = all;
  double p5 = Percentile(all, 5);
  double p95 = Percentile(copy, 95);
  double spread = p95 - p5;
  if (spread < options_.distribution_range) {
    return Fire(absl::StrCat("gradients are too narrowly distributed at step ", step,
                             ": 95th - 5th percentile = ", spread, " < distribution_range ",
                             options_.distribution_range));
  }
  return false;
}

absl::StatusOr<bool> PoorWeightInitialization::CheckLoss(uint64_t step, bool& checked) {
  TK_ASSIGN_OR_RETURN(auto names, base_trial().TensorNames(step, client::kGlobal, {}, "losses"));
  for (const std::string& name : names) {
    auto loss = base_trial().tensor(name).ReductionValue(step, "mean");
    if (!loss.ok()) {
      if (IsMissing(loss.status())) continue;
      return loss.status();
    }
    checked = true;
    auto [it, first] = losses_.try_emplace(name);
    LossProgress& p = it->second;
    if (first || *loss < p.best) {
      p.best = *loss;
      p.since_best = 0;
      continue;
    }
    if (++p.since_best >= options_.patience) {
      return Fire(absl::StrCat(name, " did not decrease for ", p.since_best,
                               " saved steps up to step ", step, " (lowest ", p.best,
                               ") within the first ", options_.steps, " steps"));
    }
  }
  return false;
}

absl::StatusOr<bool> PoorWeightInitialization::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(StepInfo info, LookupStep(step));
  if (info.mode != client::kTrain && info.mode != client::kGlobal) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("step ", step, " is not a TRAIN step"));
  }
  if (info.mode_step >= options_.steps) {
    return MakeError(
        Reason::kTensorUnavailableForStep,
        absl::StrCat("step ", step, " is beyond the first ", options_.steps, " training steps"));
  }
  bool checked = false;
  TK_ASSIGN_OR_RETURN(bool fired, CheckActivationVariance(step, checked));
  if (fired) return true;
  TK_ASSIGN_OR_RETURN(fired, CheckGradientSpread(step, checked));
  if (fired) return true;
  TK_ASSIGN_OR_RETURN(fired, CheckLoss(step, checked));
  if (fired) return true;
  if (!checked) {
    return NothingAtStep("activation inputs, gradients or losses", step);
  }
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
