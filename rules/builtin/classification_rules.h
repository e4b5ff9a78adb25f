// The rules on classifier outputs: ClassImbalance and Confusion. Both read
// the raw values of a labels tensor and a predictions tensor saved at the
// same step, and accumulate counts over the steps evaluated so far.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_CLASSIFICATION_RULES_H_
#define TENSORKEEP_RULES_BUILTIN_CLASSIFICATION_RULES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"

namespace tensorkeep {
namespace rules {

// ClassImbalance: fires when classes are badly imbalanced, or one class is
// mostly mispredicted.
//
// Parameters (strings):
//   threshold_imbalance      (default 10) the largest healthy ratio of the
//                            most to the least frequent class (among the
//                            classes seen in the labels).
//   threshold_misprediction  (default 0.7) the largest healthy share of a
//                            class's samples predicted as another class.
//   samples                  (default 500) how many samples to accumulate
//                            before judging.
//   argmax                   (default False) take the argmax of the
//                            predictions along their last axis (for scores
//                            or probabilities).
//   labels_regex             (default ".*labels") the labels tensor.
//   predictions_regex        (default ".*predictions") the predictions tensor.
// At each step where both were saved (the first matching name of each), their
// (label, prediction) pairs are added to the counts; once at least `samples`
// pairs were seen, fires when max count / min count > threshold_imbalance or
// a class's misprediction rate > threshold_misprediction.
class ClassImbalance : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    double threshold_imbalance;
    double threshold_misprediction;
    int64_t samples;
    bool argmax;
    std::string labels_regex;
    std::string predictions_regex;
  };
  ClassImbalance(client::Trial base_trial, Options options);

  const Options options_;
  std::map<int64_t, uint64_t> count_;         // samples by true class
  std::map<int64_t, uint64_t> mispredicted_;  // wrong predictions by true class
  uint64_t total_ = 0;
};

// Confusion: fires when the confusion matrix of a classifier is poor.
//
// Parameters (strings):
//   category_no   (default None: the largest class seen + 1) the number of
//                 classes; labels and predictions outside [0, category_no)
//                 are ignored.
//   labels        (default "labels") the labels tensor: its name, or a regex
//                 (anchored at the start) of it.
//   predictions   (default "predictions") the predictions tensor, the same
//                 way. Predictions with one more dimension than the labels
//                 are scores: their argmax along the last axis is taken.
//   min_diag      (default 0.9) the smallest healthy diagonal value.
//   max_off_diag  (default 0.1) the largest healthy off-diagonal value.
// At each step where both were saved, their pairs are added to the confusion
// matrix (rows: true class, columns: predicted class), which is then
// normalised by row; fires when a diagonal value < min_diag or an
// off-diagonal value > max_off_diag (rows without samples are not judged).
class Confusion : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    std::optional<int64_t> category_no;
    std::string labels;
    std::string predictions;
    double min_diag;
    double max_off_diag;
  };
  Confusion(client::Trial base_trial, Options options);

  const Options options_;
  std::map<std::pair<int64_t, int64_t>, uint64_t> matrix_;  // (true, predicted) -> count
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_CLASSIFICATION_RULES_H_
