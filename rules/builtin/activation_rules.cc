#include "rules/builtin/activation_rules.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace rules {
namespace {

// Percentage of `name`'s values at `step` outside [lo, hi] (first of the
// pair) and the number of values (second).
absl::StatusOr<std::pair<double, uint64_t>> PercentOutside(const client::Trial& trial,
                                                           const std::string& name, uint64_t step,
                                                           double lo, double hi) {
  TK_ASSIGN_OR_RETURN(client::Histogram h,
                      trial.tensor(name).GetHistogram(step, 1, std::make_pair(lo, hi)));
  uint64_t total = h.nan_count + h.outside_count;
  for (uint64_t c : h.counts) total += c;
  if (total == 0) return std::make_pair(0.0, total);
  return std::make_pair(100.0 * static_cast<double>(h.outside_count) / static_cast<double>(total),
                        total);
}

absl::Status CheckPercent(RuleParams& params, const std::string& name, double v) {
  if (v >= 0 && v <= 100) return absl::OkStatus();
  return params.Invalid(name, "must be a percentage in [0, 100]");
}

}  // namespace

// -------------------------------------------------------- SaturatedActivation

absl::StatusOr<std::unique_ptr<Rule>> SaturatedActivation::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  TK_ASSIGN_OR_RETURN(auto regexes,
                      params.Regexes("tensor_regex", {".*tanh_input", ".*sigmoid_input"}));
  TensorSelection selection({}, std::move(regexes));
  Options o;
  TK_ASSIGN_OR_RETURN(o.tanh, params.Range("threshold_tanh", {-9.4999, 9.4999}));
  TK_ASSIGN_OR_RETURN(o.sigmoid, params.Range("threshold_sigmoid", {-23.0, 16.99999}));
  TK_ASSIGN_OR_RETURN(o.threshold_inactivity, params.Double("threshold_inactivity", 1.0));
  TK_RETURN_IF_ERROR(CheckPercent(params, "threshold_inactivity", o.threshold_inactivity));
  TK_ASSIGN_OR_RETURN(o.threshold_layer, params.Double("threshold_layer", 50.0));
  TK_RETURN_IF_ERROR(CheckPercent(params, "threshold_layer", o.threshold_layer));
  return std::unique_ptr<Rule>(
      new SaturatedActivation(std::move(base_trial), std::move(selection), o));
}

SaturatedActivation::SaturatedActivation(client::Trial base_trial, TensorSelection selection,
                                         Options options)
    : Rule("SaturatedActivation", std::move(base_trial)),
      selection_(std::move(selection)),
      options_(options) {}

absl::StatusOr<bool> SaturatedActivation::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(auto names, selection_.NamesAt(base_trial(), step));
  size_t layers = 0;
  size_t saturated = 0;
  std::string worst;
  double worst_percent = -1;
  for (const std::string& name : names) {
    std::string lower = absl::AsciiStrToLower(name);
    const std::pair<double, double>* range = nullptr;
    if (absl::StrContains(lower, "tanh")) {
      range = &options_.tanh;
    } else if (absl::StrContains(lower, "sigmoid")) {
      range = &options_.sigmoid;
    } else {
      continue;
    }
    auto r = PercentOutside(base_trial(), name, step, range->first, range->second);
    if (!r.ok()) {
      if (IsMissing(r.status())) continue;
      return r.status();
    }
    if (r->second == 0) continue;
    ++layers;
    if (r->first > options_.threshold_inactivity) ++saturated;
    if (r->first > worst_percent) {
      worst_percent = r->first;
      worst = name;
    }
  }
  if (layers == 0) return NothingAtStep(selection_.Describe(), step);
  double percent = 100.0 * static_cast<double>(saturated) / static_cast<double>(layers);
  if (percent > options_.threshold_layer) {
    return Fire(absl::StrCat(saturated, " of ", layers, " activation layers saturated at step ",
                             step, " (", percent, " % > threshold_layer ", options_.threshold_layer,
                             " %); most saturated: ", worst, " with ", worst_percent,
                             " % of its values outside the range"));
  }
  return false;
}

// ------------------------------------------------------------------- DeadRelu

absl::StatusOr<std::unique_ptr<Rule>> DeadRelu::Create(client::Trial base_trial,
                                                       std::vector<client::Trial> /*other_trials*/,
                                                       RuleParams& params) {
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("tensor_regex", {".*relu_output"}));
  TensorSelection selection({}, std::move(regexes));
  TK_ASSIGN_OR_RETURN(double threshold_inactivity, params.Double("threshold_inactivity", 1.0));
  TK_RETURN_IF_ERROR(CheckPercent(params, "threshold_inactivity", threshold_inactivity));
  TK_ASSIGN_OR_RETURN(double threshold_layer, params.Double("threshold_layer", 50.0));
  TK_RETURN_IF_ERROR(CheckPercent(params, "threshold_layer", threshold_layer));
  return std::unique_ptr<Rule>(new DeadRelu(std::move(base_trial), std::move(selection),
                                            threshold_inactivity, threshold_layer));
}

DeadRelu::DeadRelu(client::Trial base_trial, TensorSelection selection, double threshold_inactivity,
                   double threshold_layer)
    : Rule("DeadRelu", std::move(base_trial)),
      selection_(std::move(selection)),
      threshold_inactivity_(threshold_inactivity),
      threshold_layer_(threshold_layer) {}

absl::StatusOr<bool> DeadRelu::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(auto names, selection_.NamesAt(base_trial(), step));
  size_t layers = 0;
  size_t dead = 0;
  std::string deadest;
  double least_active = 101;
  for (const std::string& name : names) {
    // Values in [-max, 0] are inactive; the rest (> 0) active.
    auto r = PercentOutside(base_trial(), name, step, -std::numeric_limits<double>::max(), 0.0);
    if (!r.ok()) {
      if (IsMissing(r.status())) continue;
      return r.status();
    }
    if (r->second == 0) continue;
    ++layers;
    double active = r->first;
    if (active < threshold_inactivity_) ++dead;
    if (active < least_active) {
      least_active = active;
      deadest = name;
    }
  }
  if (layers == 0) return NothingAtStep(selection_.Describe(), step);
  double percent = 100.0 * static_cast<double>(dead) / static_cast<double>(layers);
  if (percent > threshold_layer_) {
    return Fire(absl::StrCat(dead, " of ", layers, " ReLU layers dead at step ", step, " (",
                             percent, " % > threshold_layer ", threshold_layer_,
                             " %); least active: ", deadest, " with ", least_active,
                             " % of its outputs > 0"));
  }
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
