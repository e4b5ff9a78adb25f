#include "rules/builtin/check_input_images.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "rules/value_math.h"

namespace tensorkeep {
namespace rules {

absl::StatusOr<std::unique_ptr<Rule>> CheckInputImages::Create(
    client::Trial base_trial, std::vector<client::Trial> /*other_trials*/, RuleParams& params) {
  Options o;
  TK_ASSIGN_OR_RETURN(o.threshold_mean, params.Double("threshold_mean", 0.2));
  if (o.threshold_mean < 0) return params.Invalid("threshold_mean", "must not be negative");
  TK_ASSIGN_OR_RETURN(o.threshold_samples, params.Int("threshold_samples", 500));
  if (o.threshold_samples < 1) return params.Invalid("threshold_samples", "must be at least 1");
  TK_ASSIGN_OR_RETURN(o.channel, params.Int("channel", 1));
  if (o.channel < 1) {
    return params.Invalid("channel", "must be at least 1 (axis 0 counts the images)");
  }
  TK_ASSIGN_OR_RETURN(auto regexes, params.Regexes("regex", {".*hybridsequential0_input_0"}));
  return std::unique_ptr<Rule>(
      new CheckInputImages(std::move(base_trial), TensorSelection({}, std::move(regexes)), o));
}

CheckInputImages::CheckInputImages(client::Trial base_trial, TensorSelection inputs,
                                   Options options)
    : Rule("CheckInputImages", std::move(base_trial)),
      inputs_(std::move(inputs)),
      options_(options) {}

absl::StatusOr<bool> CheckInputImages::InvokeAtStep(uint64_t step) {
  TK_ASSIGN_OR_RETURN(auto names, inputs_.NamesAt(base_trial(), step));
  size_t checked = 0;
  const size_t axis = static_cast<size_t>(options_.channel);
  for (const std::string& name : names) {
    absl::StatusOr<client::Value> value = base_trial().tensor(name).GetValue(step);
    if (!value.ok()) {
      if (IsMissing(value.status())) continue;
      return value.status();
    }
    if (value->shape.size() <= axis) continue;  // not images with that channel axis
    TK_ASSIGN_OR_RETURN(std::vector<double> v, ToDoubles(*value));
    const size_t channels = static_cast<size_t>(value->shape[axis]);
    size_t stride = 1;
    for (size_t d = axis + 1; d < value->shape.size(); ++d) {
      stride *= static_cast<size_t>(value->shape[d]);
    }
    Sums& sums = sums_[name];
    if (sums.sum.size() != channels) {
      sums = Sums();
      sums.sum.assign(channels, 0.0);
      sums.count.assign(channels, 0);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      size_t c = (i / stride) % channels;
      sums.sum[c] += v[i];
      ++sums.count[c];
    }
    sums.images += static_cast<uint64_t>(value->shape[0]);
    ++checked;
    if (sums.images < static_cast<uint64_t>(options_.threshold_samples)) continue;
    for (size_t c = 0; c < channels; ++c) {
      if (sums.count[c] == 0) continue;
      double mean = sums.sum[c] / static_cast<double>(sums.count[c]);
      if (std::fabs(mean) > options_.threshold_mean) {
        return Fire(absl::StrCat("input ", name, " is not normalised: channel ", c, " has mean ",
                                 mean, " over ", sums.images, " images (threshold_mean ",
                                 options_.threshold_mean, ") at step ", step));
      }
    }
  }
  if (checked == 0) return NothingAtStep(inputs_.Describe(), step);
  return false;
}

}  // namespace rules
}  // namespace tensorkeep
