#include "rules/builtin/nlp_sequence_ratio.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> NLPSequenceRatio::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("tensor_regex", {".*embedding0_input_0"}));
  TK_ASSIGN_OR_RETURN(std::vector<double> tokens, params.DoubleList("token_values", {0.0}));
  TK_ASSIGN_OR_RETURN(std::vector<double> thresholds,
                      params.DoubleList("token_thresholds_percent", {50.0}));
  if (thresholds.size() == 1 && tokens.size() > 1) thresholds.resize(tokens.size(), thresholds[0]);
  if (thresholds.size() != tokens.size()) {
    return params.Invalid(
        "token_thresholds_percent",
        absl::StrCat("has ", thresholds.size(), " values for ", tokens.size(), " token_values"));
  }
  for (double t : thresholds) {
    if (!(t >= 0 && t <= 100)) {
      return params.Invalid("token_thresholds_percent", "must be percentages in [0, 100]");
    }
  }
  return std::unique_ptr<Rule>(new NLPSequenceRatio(std::move(base_trial),
                                                    TensorSelection({}, std::move(regexes)),
                                                    std::move(tokens), std::move(thresholds)));
}

NLPSequenceRatio::NLPSequenceRatio(client::Trial base_trial, TensorSelection inputs,
                                   std::vector<double> tokens, std::vector<double> thresholds)
    : Rule("NLPSequenceRatio", std::move(base_trial)),
      inputs_(std::move(inputs)),
      tokens_(std::move(tokens)),
      thresholds_(std::move(thresholds)) {}

absl::StatusOr<bool> NLPSequenceRatio::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(auto names, inputs_.NamesAt(base_trial(), step));
  size_t checked = 0;
  for (const std::string& name : names) {
    client::Tensor tensor = base_trial().tensor(name);
    for (size_t i = 0; i < tokens_.size(); ++i) {
      auto h = tensor.GetHistogram(step, 1, std::make_pair(tokens_[i] - 0.5, tokens_[i] + 0.5));
      if (!h.ok()) {
        if (IsMissing(h.status())) break;
        return h.status();
      }
      uint64_t total = h->nan_count + h->outside_count;
      for (uint64_t c : h->counts) total += c;
      if (total == 0) break;
      if (i == 0) ++checked;
      uint64_t hits = h->counts.empty() ? 0 : h->counts[0];
      double percent = 100.0 * static_cast<double>(hits) / static_cast<double>(total);
      if (percent > thresholds_[i]) {
        return Fire(absl::StrCat(percent, " % of ", name, " is token ", tokens_[i], " at step ",
                                 step, " (threshold ", thresholds_[i], " %)"));
      }
    }
  }
  if (checked == 0) return NothingAtStep(inputs_.Describe(), step);
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
