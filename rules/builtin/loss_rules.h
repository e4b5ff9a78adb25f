// The rules on losses: LossNotDecreasing, Overfit and Overtraining.
//
// "Loss" tensors are those of the `losses` collection unless the rule's
// parameters name others. Loss values are read as the server-side mean of
// the saved tensor (a scalar loss is its own mean); no raw values.
//
// Thread safety: as Rule.
#ifndef TENSORKEEP_RULES_BUILTIN_LOSS_RULES_H_
#define TENSORKEEP_RULES_BUILTIN_LOSS_RULES_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/params.h"
#include "rules/rule.h"
#include "rules/tensor_selection.h"

namespace tensorkeep {
namespace rules {

// LossNotDecreasing: fires when the loss stops going down.
//
// Parameters (strings):
//   collection_names       (default none) comma-separated collections of losses.
//   tensor_regex           (default none) comma-separated regexes of losses.
//   use_losses_collection  (default True) include the `losses` collection.
//   num_steps              (default 10, >= 1) how many mode steps back to compare.
//   diff_percent           (default 0.0) the decrease expected, in percent.
//   mode                   (default None) TRAIN, EVAL, PREDICT or GLOBAL; None
//                          picks EVAL if the trial has EVAL steps, else TRAIN
//                          if it has TRAIN steps, else GLOBAL (re-checked at
//                          each step until EVAL shows up, since a live trial
//                          may start evaluating later).
// Evaluated at the steps of that mode where a loss was saved: with s the mode
// step, fires when loss(s) > loss(p) * (1 - diff_percent / 100), p being the
// newest saved step <= s - num_steps; a loss without such a p is not judged.
class LossNotDecreasing : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    uint64_t num_steps;
    double diff_percent;
    std::optional<int> mode;
  };
  LossNotDecreasing(client::Trial base_trial, TensorSelection losses, Options options);
  // The mode the rule evaluates (see `mode` above).
  absl::StatusOr<int> EvaluatedMode();

  const TensorSelection losses_;
  const Options options_;
  bool saw_eval_ = false;
};

// Overfit: fires when the validation loss runs away from the training loss.
//
// Parameters (strings):
//   tensor_regex     (default None: the `losses` collection) regexes of losses.
//   start_step       (default 0) global step before which nothing is judged.
//   patience         (default 1, >= 1) consecutive evaluations needed.
//   ratio_threshold  (default 0.1) the largest healthy (val - train) / train.
// At each EVAL step where a loss was saved (an "evaluation"), with train the
// loss at the latest TRAIN step before it: an evaluation is overfit when
// (val - train) / train > ratio_threshold. Fires at the EVAL step that makes
// `patience` overfit evaluations in a row. TRAIN steps only record the
// training loss; other steps are skipped.
class Overfit : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    uint64_t start_step;
    int64_t patience;
    double ratio_threshold;
  };
  Overfit(client::Trial base_trial, TensorSelection losses, Options options);

  const TensorSelection losses_;
  const Options options_;
  std::map<std::string, double> train_loss_;  // latest training loss, by tensor
  std::map<std::string, int64_t> overfit_in_a_row_;
};

// Overtraining: fires when neither the training nor the validation loss
// improves any more.
//
// Parameters (strings):
//   patience_train       (default 5, >= 1) TRAIN steps without improvement.
//   patience_validation  (default 10, >= 1) EVAL steps without improvement.
//   delta                (default 0.1) how much lower than the best so far a
//                        loss must be to count as an improvement.
// For each loss of the `losses` collection and each of TRAIN and EVAL, the
// rule counts the saved steps since the last improvement: a loss below
// best - delta, which becomes the new best (as Keras' EarlyStopping with
// min_delta). Fires at each step where both counts have reached their
// patience.
class Overtraining : public Rule {
 public:
  // Reads the parameters from `params`; InvalidArgument naming a bad one.
  static absl::StatusOr<std::unique_ptr<Rule>> Create(client::Trial base_trial,
                                                      std::vector<client::Trial> other_trials,
                                                      RuleParams& params);

  absl::StatusOr<bool> InvokeAtStep(uint64_t step) override;

 private:
  struct Options {
    int64_t patience_train;
    int64_t patience_validation;
    double delta;
  };
  // Progress of one loss in one mode.
  struct Progress {
    double best = 0;
    int64_t since_improvement = 0;
    bool seen = false;
  };
  Overtraining(client::Trial base_trial, Options options);

  const Options options_;
  std::map<std::pair<std::string, int>, Progress> progress_;  // by (tensor, mode)
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_BUILTIN_LOSS_RULES_H_
