// InvokeRule: evaluates a rule at each complete step of its base trial, one
// after the other (smdebug's invoke_rule), as the steps complete.
//
// The steps come from the collector's WatchSteps stream (client/step_stream.h):
// every complete global step >= start_step, in increasing order, without
// polling. For each step below end_step (exclusive), Rule::InvokeAtStep runs:
//   - an error with reason TensorUnavailableForStep, StepUnavailable or
//     TensorUnavailable skips the step (logged at debug level);
//   - NoMoreData ends the invocation cleanly, as the end of the trial does
//     (smdebug lets NoMoreData escape; we don't);
//   - a failure of the connection (UNAVAILABLE, or CANCELLED by a collector
//     shutting down, without a tensorkeep reason) evaluates the step again,
//     with backoff, for up to reconnect_timeout (a stateful rule may then see
//     part of the step twice);
//   - any other error ends the invocation with that error;
//   - true means the condition is met: with raise_eval_cond the invocation
//     ends with a RuleEvaluationConditionMet error (IsConditionMet()), else
//     the issue is recorded, `on_issue` is told, and evaluation goes on
//     (unless on_issue says stop).
// The invocation ends at end_step, at the end of the trial, or when stopped.
// Rules with an IdleTimeout() are also invoked (InvokeWhenIdle) when no step
// arrived for that long.
//
// Thread safety: InvokeRule runs on the calling thread (plus one reader
// thread of its own); the rule must not be used elsewhere meanwhile.
#ifndef TENSORKEEP_RULES_INVOKE_RULE_H_
#define TENSORKEEP_RULES_INVOKE_RULE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rules/rule.h"

namespace tensorkeep {
namespace rules {

// One time the rule's condition was met.
struct RuleIssue {
  // The step it was met at; nullopt for an idle invocation before any step.
  std::optional<uint64_t> step;
  std::string message;
};

// What happened at one step.
struct StepOutcome {
  StepInfo step;
  bool evaluated = false;  // false: skipped (tensors missing)
  bool issue = false;      // the condition was met here
};

struct InvokeOptions {
  // Global step to start from (inclusive).
  uint64_t start_step = 0;
  // Global step to end before (exclusive); nullopt: till the end of the trial.
  std::optional<uint64_t> end_step;
  // End with a RuleEvaluationConditionMet error at the first issue.
  bool raise_eval_cond = false;
  // Wait for a trial that does not exist yet instead of failing with
  // TrialNotFound.
  bool wait_for_trial = true;
  // Give up when the collector was unreachable for this long.
  absl::Duration reconnect_timeout = absl::Seconds(60);
  // Called after each step (evaluated or skipped), on the invoking thread.
  std::function<void(const StepOutcome&)> on_step;
  // Called at each issue (unless raise_eval_cond), on the invoking thread;
  // returns whether to go on evaluating. Unset: go on.
  std::function<bool(const RuleIssue&)> on_issue;
  // Called on the invoking thread every `tick_interval` while the invocation
  // runs (between steps, or while waiting for one), e.g. to report progress.
  std::function<void()> on_tick;
  absl::Duration tick_interval = absl::Seconds(1);
};

// What an invocation did.
struct InvokeSummary {
  uint64_t steps_evaluated = 0;
  uint64_t steps_skipped = 0;
  // The last step taken from the stream (evaluated or skipped).
  std::optional<uint64_t> last_step;
  uint64_t issues_found = 0;
  // The first issue, if any.
  std::optional<RuleIssue> first_issue;
  // The steps of the first kMaxIssueSteps issues.
  std::vector<uint64_t> issue_steps;
  // Ended because the trial ended (rather than end_step or on_issue).
  bool end_of_trial = false;
  // Ended because on_issue returned false.
  bool stopped_on_issue = false;

  static constexpr size_t kMaxIssueSteps = 1000;
};

// Invokes `rule` as described above. Returns the summary, or the error that
// ended it (RuleEvaluationConditionMet with raise_eval_cond).
absl::StatusOr<InvokeSummary> InvokeRule(Rule& rule, const InvokeOptions& options);

// smdebug's signature: invoke_rule(rule, start_step=0, end_step=None,
// raise_eval_cond=False).
absl::StatusOr<InvokeSummary> InvokeRule(Rule& rule, uint64_t start_step = 0,
                                         std::optional<uint64_t> end_step = std::nullopt,
                                         bool raise_eval_cond = false);

// The error InvokeRule returns with raise_eval_cond (code ABORTED, with a
// payload that marks it): "Evaluation of the rule NAME at step N resulted
// in the condition being met: MESSAGE".
absl::Status RuleEvaluationConditionMet(const std::string& rule, const RuleIssue& issue);
// True for an error made by RuleEvaluationConditionMet.
bool IsConditionMet(const absl::Status& status);
// The step of such an error (nullopt if none or not such an error).
std::optional<uint64_t> ConditionMetStep(const absl::Status& status);

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_INVOKE_RULE_H_
