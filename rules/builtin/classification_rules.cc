#include "rules/builtin/classification_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "rules/tensor_selection.h"
#include "rules/value_math.h"

namespace tensorkeep {
namespace rules {
namespace {

// The tensor saved at `step` named `pattern`, or else the first (sorted) that
// `pattern` matches as a regex; TensorUnavailableForStep if none.
absl::StatusOr<std::string> FindTensor(const client::Trial& trial, uint64_t step,
                                       const std::string& pattern) {
  TK_ASSIGN_OR_RETURN(auto names, trial.TensorNames(step, client::kGlobal, {pattern}));
  if (names.empty()) return NothingAtStep(absl::StrCat("'", pattern, "'"), step);
  if (std::find(names.begin(), names.end(), pattern) != names.end()) return pattern;
  return names.front();
}

// The (label, prediction) pairs at `step`.
struct Pairs {
  std::vector<int64_t> labels;
  std::vector<int64_t> predictions;
};

absl::StatusOr<Pairs> ReadPairs(const client::Trial& trial, uint64_t step,
                                const std::string& labels_pattern,
                                const std::string& predictions_pattern,
                                std::optional<bool> argmax) {
  TK_ASSIGN_OR_RETURN(std::string labels_name, FindTensor(trial, step, labels_pattern));
  TK_ASSIGN_OR_RETURN(std::string predictions_name, FindTensor(trial, step, predictions_pattern));
  TK_ASSIGN_OR_RETURN(client::Value labels, trial.tensor(labels_name).GetValue(step));
  TK_ASSIGN_OR_RETURN(client::Value predictions, trial.tensor(predictions_name).GetValue(step));
  // Unset: scores when the predictions have one more dimension than the labels.
  bool take_argmax = argmax.value_or(predictions.shape.size() == labels.shape.size() + 1);
  Pairs pairs;
  TK_ASSIGN_OR_RETURN(pairs.labels, ClassIndices(labels, false));
  TK_ASSIGN_OR_RETURN(pairs.predictions, ClassIndices(predictions, take_argmax));
  if (pairs.labels.size() != pairs.predictions.size()) {
    return MakeError(
        Reason::kTensorUnavailableForStep,
        absl::StrCat(labels_name, " has ", pairs.labels.size(), " labels but ", predictions_name,
                     " ", pairs.predictions.size(), " predictions at step ", step));
  }
  return pairs;
}

}  // namespace

// ------------------------------------------------------------- ClassImbalance

absl::StatusOr<std::unique_ptr<Rule>> ClassImbalance::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  Options o;
  TK_ASSIGN_OR_RETURN(o.threshold_imbalance, params.Double("threshold_imbalance", 10.0));
  if (o.threshold_imbalance < 1) {
    return params.Invalid("threshold_imbalance", "must be at least 1");
  }
  TK_ASSIGN_OR_RETURN(o.threshold_misprediction, params.Double("threshold_misprediction", 0.7));
  if (!(o.threshold_misprediction >= 0 && o.threshold_misprediction <= 1)) {
    return params.Invalid("threshold_misprediction", "must be a fraction in [0, 1]");
  }
  TK_ASSIGN_OR_RETURN(o.samples, params.Int("samples", 500));
  if (o.samples < 1) return params.Invalid("samples", "must be at least 1");
  TK_ASSIGN_OR_RETURN(o.argmax, params.Bool("argmax", false));
  TK_ASSIGN_OR_RETURN(auto labels, params.Regexes("labels_regex", {".*labels"}));
  TK_ASSIGN_OR_RETURN(auto predictions, params.Regexes("predictions_regex", {".*predictions"}));
  if (labels.size() != 1) return params.Invalid("labels_regex", "expected one regex");
  if (predictions.size() != 1) return params.Invalid("predictions_regex", "expected one regex");
  o.labels_regex = labels[0];
  o.predictions_regex = predictions[0];
  return std::unique_ptr<Rule>(new ClassImbalance(std::move(base_trial), std::move(o)));
}

ClassImbalance::ClassImbalance(client::Trial base_trial, Options options)
    : Rule("ClassImbalance", std::move(base_trial)), options_(std::move(options)) {}

absl::StatusOr<bool> ClassImbalance::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(Pairs pairs, ReadPairs(base_trial(), step, options_.labels_regex,
                                             options_.predictions_regex, options_.argmax));
  for (size_t i = 0; i < pairs.labels.size(); ++i) {
    ++count_[pairs.labels[i]];
    if (pairs.predictions[i] != pairs.labels[i]) ++mispredicted_[pairs.labels[i]];
  }
  total_ += pairs.labels.size();
  if (total_ < static_cast<uint64_t>(options_.samples) || count_.empty()) return false;
  auto [min_it, max_it] =
      std::minmax_element(count_.begin(), count_.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; });
  double ratio = static_cast<double>(max_it->second) / static_cast<double>(min_it->second);
  if (ratio > options_.threshold_imbalance) {
    return Fire(absl::StrCat("class imbalance at step ", step, ": class ", max_it->first, " has ",
                             max_it->second, " samples, class ", min_it->first, " ", min_it->second,
                             " (ratio ", ratio, " > threshold_imbalance ",
                             options_.threshold_imbalance, ") over ", total_, " samples"));
  }
  for (const auto& [cls, n] : count_) {
    auto it = mispredicted_.find(cls);
    double rate =
        it == mispredicted_.end() ? 0.0 : static_cast<double>(it->second) / static_cast<double>(n);
    if (rate > options_.threshold_misprediction) {
      return Fire(absl::StrCat("class ", cls, " is mispredicted in ", rate * 100, " % of its ", n,
                               " samples (threshold_misprediction ",
                               options_.threshold_misprediction, ") at step ", step));
    }
  }
  return false;
}

// ------------------------------------------------------------------ Confusion

absl::StatusOr<std::unique_ptr<Rule>> Confusion::Create(client::Trial base_trial,
                                                        std::vector<client::Trial> /*other_trials*/,
                                                        RuleParams& params) {
  Options o;
  TK_ASSIGN_OR_RETURN(o.category_no, params.OptionalInt("category_no"));
  if (o.category_no.has_value() && *o.category_no < 2) {
    return params.Invalid("category_no", "must be at least 2");
  }
  TK_ASSIGN_OR_RETURN(auto labels, params.Regexes("labels", {"labels"}));
  TK_ASSIGN_OR_RETURN(auto predictions, params.Regexes("predictions", {"predictions"}));
  if (labels.size() != 1) return params.Invalid("labels", "expected one tensor name");
  if (predictions.size() != 1) return params.Invalid("predictions", "expected one tensor name");
  o.labels = labels[0];
  o.predictions = predictions[0];
  TK_ASSIGN_OR_RETURN(o.min_diag, params.Double("min_diag", 0.9));
  TK_ASSIGN_OR_RETURN(o.max_off_diag, params.Double("max_off_diag", 0.1));
  if (!(o.min_diag >= 0 && o.min_diag <= 1)) {
    return params.Invalid("min_diag", "must be a fraction in [0, 1]");
  }
  if (!(o.max_off_diag >= 0 && o.max_off_diag <= 1)) {
    return params.Invalid("max_off_diag", "must be a fraction in [0, 1]");
  }
  return std::unique_ptr<Rule>(new Confusion(std::move(base_trial), std::move(o)));
}

Confusion::Confusion(client::Trial base_trial, Options options)
    : Rule("Confusion", std::move(base_trial)), options_(std::move(options)) {}

absl::StatusOr<bool> Confusion::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(Pairs pairs, ReadPairs(base_trial(), step, options_.labels,
                                             options_.predictions, std::nullopt));
  for (size_t i = 0; i < pairs.labels.size(); ++i) {
    int64_t t = pairs.labels[i], p = pairs.predictions[i];
    if (t < 0 || p < 0) continue;
    if (options_.category_no.has_value() &&
        (t >= *options_.category_no || p >= *options_.category_no)) {
      continue;
    }
    ++matrix_[{t, p}];
  }
  // Row sums, then each cell normalised by its row.
  std::map<int64_t, uint64_t> rows;
  int64_t n = options_.category_no.value_or(0);
  for (const auto& [cell, count] : matrix_) {
    rows[cell.first] += count;
    if (!options_.category_no.has_value()) n = std::max(n, std::max(cell.first, cell.second) + 1);
  }
  if (rows.empty()) return false;
  for (const auto& [t, total] : rows) {
    for (int64_t p = 0; p < n; ++p) {
      auto it = matrix_.find({t, p});
      double v =
          it == matrix_.end() ? 0.0 : static_cast<double>(it->second) / static_cast<double>(total);
      if (p == t && v < options_.min_diag) {
        return Fire(absl::StrCat("confusion[", t, "][", t, "] = ", v, " < min_diag ",
                                 options_.min_diag, " at step ", step, " (", total,
                                 " samples of class ", t, ")"));
      }
      if (p != t && v > options_.max_off_diag) {
        return Fire(absl::StrCat("confusion[", t, "][", p, "] = ", v, " > max_off_diag ",
                                 options_.max_off_diag, " at step ", step, " (", total,
                                 " samples of class ", t, ")"));
      }
    }
  }
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
