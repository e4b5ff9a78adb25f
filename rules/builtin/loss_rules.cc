#include "rules/builtin/loss_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace rules {
namespace {

// A skip: `step` is not of the mode the rule evaluates.
absl::Status NotOfMode(uint64_t step, int mode) {
  return MakeError(Reason::kTensorUnavailableForStep,
                   absl::StrCat("step ", step, " is not a ", client::ModeText(mode), " step"));
}

// The loss value of tensor `name` at mode step `s` of `mode`.
absl::StatusOr<double> LossAt(const client::Trial& trial, const std::string& name, uint64_t s,
                              int mode) {
  return trial.tensor(name).ReductionValue(s, "mean", mode);
}

}  // namespace

// ------------------------------------------------------------ LossNotDecreasing

absl::StatusOr<std::unique_ptr<Rule>> LossNotDecreasing::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  std::vector<std::string> collections = params.List("collection_names");
  TK_ASSIGN_OR_RETURN(std::vector<std::string> regexes, params.Regexes("tensor_regex"));
  TK_ASSIGN_OR_RETURN(bool use_losses, params.Bool("use_losses_collection", true));
  if (use_losses &&
      std::find(collections.begin(), collections.end(), "losses") == collections.end()) {
    collections.push_back("losses");
  }
  if (collections.empty() && regexes.empty()) {
    return params.Invalid("use_losses_collection",
                          "with use_losses_collection False, give collection_names or "
                          "tensor_regex");
  }
  Options o;
  TK_ASSIGN_OR_RETURN(int64_t num_steps, params.Int("num_steps", 10));
  if (num_steps < 1) return params.Invalid("num_steps", "must be at least 1");
  o.num_steps = static_cast<uint64_t>(num_steps);
  TK_ASSIGN_OR_RETURN(o.diff_percent, params.Double("diff_percent", 0.0));
  if (!(o.diff_percent >= 0 && o.diff_percent <= 100)) {
    return params.Invalid("diff_percent", "must be a percentage in [0, 100]");
  }
  if (auto mode = params.OptionalString("mode"); mode.has_value()) {
    auto parsed = client::ParseMode(*mode);
    if (!parsed.ok()) return params.Invalid("mode", "expected TRAIN, EVAL, PREDICT or GLOBAL");
    o.mode = *parsed;
  }
  return std::unique_ptr<Rule>(new LossNotDecreasing(
      std::move(base_trial), TensorSelection(std::move(collections), std::move(regexes)), o));
}

LossNotDecreasing::LossNotDecreasing(client::Trial base_trial, TensorSelection losses,
                                     Options options)
    : Rule("LossNotDecreasing", std::move(base_trial)),
      losses_(std::move(losses)),
      options_(options) {}

absl::StatusOr<int> LossNotDecreasing::EvaluatedMode() {
  if (options_.mode.has_value()) return *options_.mode;
  if (saw_eval_) return client::kEval;
  TK_ASSIGN_OR_RETURN(std::vector<int> modes, base_trial().Modes());
  auto has = [&](int m) { return std::find(modes.begin(), modes.end(), m) != modes.end(); };
  if (has(client::kEval)) {
    saw_eval_ = true;
    return client::kEval;
  }
  return has(client::kTrain) ? client::kTrain : client::kGlobal;
}

absl::StatusOr<bool> LossNotDecreasing::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(int mode, EvaluatedMode());
  uint64_t s = step;
  if (mode != client::kGlobal) {
    TK_ASSIGN_OR_RETURN(StepInfo info, LookupStep(step));
    if (info.mode != mode) return NotOfMode(step, mode);
    s = info.mode_step;
  }
  TK_ASSIGN_OR_RETURN(auto names, losses_.NamesAt(base_trial(), step));
  if (names.empty()) return NothingAtStep(losses_.Describe(), step);
  if (s < options_.num_steps) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("no loss ", options_.num_steps, " steps before step ", step));
  }
  size_t checked = 0;
  for (const std::string& name : names) {
    TK_ASSIGN_OR_RETURN(std::vector<uint64_t> prev,
                        base_trial().tensor(name).PrevSteps(s - options_.num_steps, 1, mode));
    if (prev.empty()) continue;
    TK_ASSIGN_OR_RETURN(double now, LossAt(base_trial(), name, s, mode));
    TK_ASSIGN_OR_RETURN(double before, LossAt(base_trial(), name, prev[0], mode));
    ++checked;
    double limit = before * (1.0 - options_.diff_percent / 100.0);
    if (now > limit) {
      return Fire(absl::StrCat(name, " did not decrease: ", client::ModeText(mode), " step ", s,
                               " (global ", step, "): ", now, " > ", limit, " (loss ", before,
                               " at ", client::ModeText(mode), " step ", prev[0], ", diff_percent ",
                               options_.diff_percent, ")"));
    }
  }
  if (checked == 0) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("no loss ", options_.num_steps, " steps before step ", step));
  }
  return false;
}

// ------------------------------------------------------------------- Overfit

absl::StatusOr<std::unique_ptr<Rule>> Overfit::Create(client::Trial base_trial,
                                                      std::vector<client::Trial> /*other_trials*/,
                                                      RuleParams& params) {
  TK_ASSIGN_OR_RETURN(std::vector<std::string> regexes, params.Regexes("tensor_regex"));
  std::vector<std::string> collections;
  if (regexes.empty()) collections.push_back("losses");
  Options o;
  TK_ASSIGN_OR_RETURN(int64_t start_step, params.Int("start_step", 0));
  if (start_step < 0) return params.Invalid("start_step", "must not be negative");
  o.start_step = static_cast<uint64_t>(start_step);
  TK_ASSIGN_OR_RETURN(o.patience, params.Int("patience", 1));
  if (o.patience < 1) return params.Invalid("patience", "must be at least 1");
  TK_ASSIGN_OR_RETURN(o.ratio_threshold, params.Double("ratio_threshold", 0.1));
  return std::unique_ptr<Rule>(new Overfit(
      std::move(base_trial), TensorSelection(std::move(collections), std::move(regexes)), o));
}

Overfit::Overfit(client::Trial base_trial, TensorSelection losses, Options options)
    : Rule("Overfit", std::move(base_trial)), losses_(std::move(losses)), options_(options) {}

absl::StatusOr<bool> Overfit::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(StepInfo info, LookupStep(step));
  if (info.mode != client::kTrain && info.mode != client::kEval) {
    return NotOfMode(step, client::kEval);
  }
  TK_ASSIGN_OR_RETURN(auto names, losses_.NamesAt(base_trial(), step));
  if (names.empty()) return NothingAtStep(losses_.Describe(), step);
  if (info.mode == client::kTrain) {
    for (const std::string& name : names) {
      TK_ASSIGN_OR_RETURN(train_loss_[name], LossAt(base_trial(), name, step, client::kGlobal));
    }
    return false;
  }
  if (step < options_.start_step) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("step ", step, " is before start_step ", options_.start_step));
  }
  size_t checked = 0;
  for (const std::string& name : names) {
    auto train = train_loss_.find(name);
    if (train == train_loss_.end()) continue;
    TK_ASSIGN_OR_RETURN(double val, LossAt(base_trial(), name, step, client::kGlobal));
    ++checked;
    double ratio = train->second != 0 ? (val - train->second) / std::fabs(train->second)
                                      : (val > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    int64_t& in_a_row = overfit_in_a_row_[name];
    in_a_row = ratio > options_.ratio_threshold ? in_a_row + 1 : 0;
    if (in_a_row >= options_.patience) {
      return Fire(absl::StrCat(name, " overfits at step ", step, ": (validation ", val,
                               " - training ", train->second, ") / training = ", ratio, " > ",
                               options_.ratio_threshold, " for ", in_a_row,
                               " evaluation(s) in a row"));
    }
  }
  if (checked == 0) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("no training loss before step ", step));
  }
  return false;
}

// --------------------------------------------------------------- Overtraining

absl::StatusOr<std::unique_ptr<Rule>> Overtraining::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  Options o;
  TK_ASSIGN_OR_RETURN(o.patience_train, params.Int("patience_train", 5));
  if (o.patience_train < 1) return params.Invalid("patience_train", "must be at least 1");
  TK_ASSIGN_OR_RETURN(o.patience_validation, params.Int("patience_validation", 10));
  if (o.patience_validation < 1) {
    return params.Invalid("patience_validation", "must be at least 1");
  }
  TK_ASSIGN_OR_RETURN(o.delta, params.Double("delta", 0.1));
  if (o.delta < 0) return params.Invalid("delta", "must not be negative");
  return std::unique_ptr<Rule>(new Overtraining(std::move(base_trial), o));
}

Overtraining::Overtraining(client::Trial base_trial, Options options)
    : Rule("Overtraining", std::move(base_trial)), options_(options) {}

absl::StatusOr<bool> Overtraining::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(StepInfo info, LookupStep(step));
  if (info.mode != client::kTrain && info.mode != client::kEval) {
    return NotOfMode(step, client::kTrain);
  }
  TK_ASSIGN_OR_RETURN(auto names, base_trial().TensorNames(step, client::kGlobal, {}, "losses"));
  if (names.empty()) return NothingAtStep("collection losses", step);
  const int other = info.mode == client::kTrain ? client::kEval : client::kTrain;
  for (const std::string& name : names) {
    TK_ASSIGN_OR_RETURN(double loss, LossAt(base_trial(), name, step, client::kGlobal));
    Progress& p = progress_[{name, info.mode}];
    // As Keras' EarlyStopping: the best moves only on an improvement by delta.
    if (!p.seen || loss < p.best - options_.delta) {
      p.best = loss;
      p.since_improvement = 0;
      p.seen = true;
    } else {
      ++p.since_improvement;
    }
    auto q = progress_.find({name, other});
    if (q == progress_.end()) continue;
    const Progress& train = info.mode == client::kTrain ? p : q->second;
    const Progress& val = info.mode == client::kTrain ? q->second : p;
    if (train.since_improvement >= options_.patience_train &&
        val.since_improvement >= options_.patience_validation) {
      return Fire(absl::StrCat(name, " stopped improving by delta ", options_.delta,
                               ": training loss for ", train.since_improvement, " steps (best ",
                               train.best, "), validation loss for ", val.since_improvement,
                               " steps (best ", val.best, "), at step ", step));
    }
  }
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
