// Rule: code evaluated at each complete step of a trial (smdebug's Rule).
//
// A rule is anchored to a base trial and may look at other trials. InvokeRule
// (rules/invoke_rule.h) calls InvokeAtStep(step) for each complete global step
// in order; the rule answers whether its condition is met (an issue found) at
// that step, and describes the issue in last_message(). As in smdebug, a rule
// may read tensors of the current step and any earlier step; it reports a step
// at which its tensors were not saved by returning the status of the failed
// query (TensorUnavailableForStep, StepUnavailable or TensorUnavailable), and
// InvokeRule then skips that step.
//
// Rules find the tensors they need lazily, at each step (a live trial gains
// tensors as training goes on), from the base trial's index.
//
// Writing a rule:
//
//   class MyGradientRule : public tensorkeep::rules::Rule {
//    public:
//     MyGradientRule(client::Trial trial, double threshold)
//         : Rule("MyGradientRule", std::move(trial)), threshold_(threshold) {}
//     absl::StatusOr<bool> InvokeAtStep(uint64_t step) override {
//       TK_ASSIGN_OR_RETURN(auto names, base_trial().TensorNames(step, client::kGlobal, {},
//                                                                "gradients"));
//       for (const auto& name : names) {
//         TK_ASSIGN_OR_RETURN(double m, base_trial().tensor(name).ReductionValue(
//                                           step, "mean", client::kGlobal, "", true));
//         if (m > threshold_) return Fire(absl::StrCat(name, " too large"));
//       }
//       return false;
//     }
//    private:
//     double threshold_;
//   };
//
// Thread safety: a Rule is used by one thread at a time (InvokeRule calls it
// from the thread that called InvokeRule).
#ifndef TENSORKEEP_RULES_RULE_H_
#define TENSORKEEP_RULES_RULE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/trial.h"

namespace tensorkeep {
namespace rules {

// Where a global step sits: its mode and its step within that mode.
struct StepInfo {
  uint64_t step = 0;  // global
  int mode = client::kGlobal;
  uint64_t mode_step = 0;
};

class Rule {
 public:
  // `name` identifies the rule in messages (smdebug uses the class name).
  // `other_trials` may be empty.
  Rule(std::string name, client::Trial base_trial, std::vector<client::Trial> other_trials = {});
  virtual ~Rule() = default;

  Rule(const Rule&) = delete;
  Rule& operator=(const Rule&) = delete;

  // Evaluates the rule at global step `step`, which is complete. Returns true
  // when the rule's condition is met (an issue found; last_message() says
  // what), false when not. An error with reason TensorUnavailableForStep,
  // StepUnavailable or TensorUnavailable means "nothing to evaluate here":
  // InvokeRule skips the step. Any other error ends the invocation.
  virtual absl::StatusOr<bool> InvokeAtStep(uint64_t step) = 0;

  // Rules that watch time rather than steps (StalledTrainingRule): how long
  // InvokeRule may wait for the next step before it calls InvokeWhenIdle.
  // Default: no limit.
  virtual std::optional<absl::Duration> IdleTimeout() const { return std::nullopt; }
  // Called by InvokeRule when no new step arrived for IdleTimeout(): `idle` is
  // the time since the last step (or since the invocation started),
  // `last_step` the last step seen. Returns true when the condition is met.
  // Default: false.
  virtual absl::StatusOr<bool> InvokeWhenIdle(absl::Duration idle,
                                              std::optional<uint64_t> last_step);

  // True when the rule itself asks to stop training when it fires (a
  // parameter such as StalledTrainingRule's stop_training_on_fire); the rule
  // worker then reports its issue with the "stop" action. Default: false.
  virtual bool StopTrainingOnFire() const { return false; }

  const std::string& name() const { return name_; }
  const client::Trial& base_trial() const { return base_trial_; }
  const std::vector<client::Trial>& other_trials() const { return other_trials_; }
  // The description of the last issue found ("" before any).
  const std::string& last_message() const { return message_; }

  // Tells the rule the mode of a global step (InvokeRule does, from the step
  // stream, before InvokeAtStep), so that LookupStep needs no query.
  void NoteStep(const StepInfo& info);

 protected:
  // Sets last_message() and returns true: `return Fire("...");`.
  bool Fire(std::string message);
  // The mode and mode step of global step `step`: from NoteStep if known,
  // else asked of the base trial. A step of mode GLOBAL (saved without a
  // mode) has mode_step == step, so that (mode, mode_step) always addresses it.
  absl::StatusOr<StepInfo> LookupStep(uint64_t step);

 private:
  // Steps noted are kept for the most recent kMaxNotedSteps steps.
  static constexpr size_t kMaxNotedSteps = 4096;

  std::string name_;
  client::Trial base_trial_;
  std::vector<client::Trial> other_trials_;
  std::string message_;
  std::map<uint64_t, StepInfo> steps_;
};

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_RULE_H_
