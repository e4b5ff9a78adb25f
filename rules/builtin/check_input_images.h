// CheckInputImages: fires when input images are not normalised (their mean
// is far from zero).
//
// Parameters (strings):
//   threshold_mean     (default 0.2) how far from 0 a channel's mean may be.
//   threshold_samples  (default 500) how many images to see before judging.
//   regex              (default ".*hybridsequential0_input_0") the input
//                      tensors (comma-separated regexes).
//   channel            (default 1) the axis of the colour channel (NCHW: 1,
//                      NHWC: 3); axis 0 counts the images.
// At each step where a matching tensor was saved, its images are added to
// per-channel sums (each tensor on its own); once a tensor has shown at
// least threshold_samples images, fires when the mean of a channel over them
// is further than threshold_mean from 0. Reads raw values.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_CHECK_INPUT_IMAGES_H_
#define TENSORKEEP_RULES_BUILTIN_CHECK_INPUT_IMAGES_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

class CheckInputImages : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    double threshold_mean;
    int64_t threshold_samples;
    int64_t channel;
  };
  // Per-channel sums of one input tensor.
  struct Sums {
    uint64_t images = 0;
    std::vector<double> sum;      // by channel
    std::vector<uint64_t> count;  // by channel
  };
  CheckInputImages(client::Trial base_trial, TensorSelection inputs, Options options);

  const TensorSelection inputs_;
  const Options options_;
  std::map<std::string, Sums> sums_;  // by tensor
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_CHECK_INPUT_IMAGES_H_
