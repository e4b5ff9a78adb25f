#include "rules/builtin/unchanged_tensor.h"

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "rules/value_math.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> UnchangedTensor::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("tensor_regex"));
  TensorSelection selection(params.List("collection_names"), std::move(regexes));
  Options o;
  TK_ASSIGN_OR_RETURN(o.num_steps, params.Int("num_steps", 3));
  if (o.num_steps < 2) return params.Invalid("num_steps", "must be at least 2");
  TK_ASSIGN_OR_RETURN(o.rtol, params.Double("rtol", 1e-5));
  TK_ASSIGN_OR_RETURN(o.atol, params.Double("atol", 1e-8));
  if (o.rtol < 0) return params.Invalid("rtol", "must not be negative");
  if (o.atol < 0) return params.Invalid("atol", "must not be negative");
  TK_ASSIGN_OR_RETURN(o.equal_nan, params.Bool("equal_nan", false));
  return std::unique_ptr<Rule>(new UnchangedTensor(std::move(base_trial), std::move(selection), o));
}

UnchangedTensor::UnchangedTensor(client::Trial base_trial, TensorSelection selection,
                                 Options options)
    : Rule("UnchangedTensor", std::move(base_trial)),
      selection_(std::move(selection)),
      options_(options) {}

absl::StatusOr<bool> UnchangedTensor::Unchanged(const std::string& name, int mode,
                                                uint64_t mode_step) {
  client::Tensor tensor = base_trial().tensor(name);
  TK_ASSIGN_OR_RETURN(std::vector<uint64_t> steps,
                      tensor.PrevSteps(mode_step, static_cast<uint32_t>(options_.num_steps), mode));
  if (steps.size() < static_cast<size_t>(options_.num_steps)) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat(name, " has only ", steps.size(), " saved steps so far"));
  }
  auto& cached = cache_[name];
  // Drop what left the window.
  for (auto it = cached.begin(); it != cached.end();) {
    bool keep = it->first.first == mode && it->first.second >= steps.front();
    it = keep ? std::next(it) : cached.erase(it);
  }
  for (uint64_t s : steps) {
    auto key = std::make_pair(mode, s);
    if (cached.count(key) != 0) continue;
    TK_ASSIGN_OR_RETURN(client::Value value, tensor.GetValue(s, mode));
    TK_ASSIGN_OR_RETURN(cached[key], ToDoubles(value));
  }
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const auto& a = cached[std::make_pair(mode, steps[i])];
    const auto& b = cached[std::make_pair(mode, steps[i + 1])];
    if (!AllClose(a, b, options_.rtol, options_.atol, options_.equal_nan)) return false;
  }
  return true;
}

absl::StatusOr<bool> UnchangedTensor::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(StepInfo info, LookupStep(step));
  TK_ASSIGN_OR_RETURN(auto names, selection_.NamesAt(base_trial(), step));
  size_t checked = 0;
  for (const std::string& name : names) {
    absl::StatusOr<bool> unchanged = Unchanged(name, info.mode, info.mode_step);
    if (!unchanged.ok()) {
      if (IsMissing(unchanged.status())) continue;
      return unchanged.status();
    }
    ++checked;
    if (*unchanged) {
      return Fire(absl::StrCat(name, " did not change over its last ", options_.num_steps,
                               " saved steps up to step ", step, " (rtol ", options_.rtol,
                               ", atol ", options_.atol, ")"));
    }
  }
  if (checked == 0) return NothingAtStep(selection_.Describe(), step);
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
