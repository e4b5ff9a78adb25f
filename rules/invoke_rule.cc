#include "rules/invoke_rule.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/errors.h"
#include "client/step_stream.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace rules {
namespace {

constexpr char kConditionMetKey[] = "tensorkeep.RuleEvaluationConditionMet";

bool IsSkippable(Reason reason) {
  return reason == Reason::kTensorUnavailableForStep || reason == Reason::kStepUnavailable ||
         reason == Reason::kTensorUnavailable;
}

// A failure of the connection rather than of the query: the collector is
// unreachable, or shutting down (it cancels the calls in flight).
bool IsTransient(const absl::Status& status) {
  return GetReason(status) == Reason::kNone &&
         (absl::IsUnavailable(status) || absl::IsCancelled(status));
}

// `status` with `prefix` before its message, keeping its payloads (the
// reason among them).
absl::Status WithContext(const absl::Status& status, const std::string& prefix) {
  absl::Status out(status.code(), absl::StrCat(prefix, status.message()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace

absl::Status RuleEvaluationConditionMet(const std::string& rule, const RuleIssue& issue) {
  std::string at = issue.step.has_value() ? absl::StrCat(" at step ", *issue.step) : "";
  absl::Status status = absl::AbortedError(
      absl::StrCat("Evaluation of the rule ", rule, at, " resulted in the condition being met",
                   issue.message.empty() ? "" : ": ", issue.message));
  status.SetPayload(kConditionMetKey,
                    absl::Cord(issue.step.has_value() ? absl::StrCat(*issue.step) : ""));
  return status;
}

bool IsConditionMet(const absl::Status& status) {
  return status.GetPayload(kConditionMetKey).has_value();
}

std::optional<uint64_t> ConditionMetStep(const absl::Status& status) {
  auto payload = status.GetPayload(kConditionMetKey);
  uint64_t step = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &step)) {
    return std::nullopt;
  }
  return step;
}

absl::StatusOr<InvokeSummary> InvokeRule(Rule& rule, uint64_t start_step,
                                         std::optional<uint64_t> end_step, bool raise_eval_cond) {
  InvokeOptions options;
  options.start_step = start_step;
  options.end_step = end_step;
  options.raise_eval_cond = raise_eval_cond;
  return InvokeRule(rule, options);
}

absl::StatusOr<InvokeSummary> InvokeRule(Rule& rule, const InvokeOptions& options) {
  InvokeSummary summary;
  spdlog::info("Started execution of rule {} at step {}", rule.name(), options.start_step);
  if (options.end_step.has_value() && *options.end_step <= options.start_step) {
    return summary;
  }
  client::StepStreamOptions stream_options;
  stream_options.from_step = options.start_step;
  stream_options.wait_for_trial = options.wait_for_trial;
  stream_options.reconnect_timeout = options.reconnect_timeout;
  std::unique_ptr<client::StepStream> stream =
      client::StepStream::Start(rule.base_trial().connection(), rule.base_trial().name(), stream_options);

  // Records an issue; returns an error to end with, or whether to go on.
  auto on_issue = [&](RuleIssue issue) -> absl::StatusOr<bool> {
    ++summary.issues_found;
    if (issue.step.has_value() && summary.issue_steps.size() < InvokeSummary::kMaxIssueSteps) {
      summary.issue_steps.push_back(*issue.step);
    }
    if (!summary.first_issue.has_value()) summary.first_issue = issue;
    if (options.raise_eval_cond) return RuleEvaluationConditionMet(rule.name(), issue);
    spdlog::info("Evaluation of the rule {}{} resulted in the condition being met{}{}", rule.name(),
                 issue.step.has_value() ? absl::StrCat(" at step ", *issue.step) : "",
                 issue.message.empty() ? "" : ": ", issue.message);
    if (options.on_issue && !options.on_issue(issue)) {
      summary.stopped_on_issue = true;
      return false;
    }
    return true;
  };

  const std::optional<absl::Duration> idle_timeout = rule.IdleTimeout();
  absl::Time last_activity = absl::Now();
  absl::Time next_tick =
      options.on_tick ? last_activity + options.tick_interval : absl::InfiniteFuture();
  // The trial's LOST workers as the last step event said: a change is
  // logged (steps complete without LOST workers; docs/semantics.md).
  std::vector<std::string> lost;
  while (true) {
    absl::Time idle_deadline =
        idle_timeout.has_value() ? last_activity + *idle_timeout : absl::InfiniteFuture();
    if (absl::Now() >= next_tick) {
      options.on_tick();
      next_tick = absl::Now() + options.tick_interval;
    }
    auto next = stream->Next(std::min(idle_deadline, next_tick));
    if (!next.ok()) {
      return WithContext(next.status(),
                         absl::StrCat("rule ", rule.name(), ": watching the steps of trial '",
                                      rule.base_trial().name(), "': "));
    }
    if (!next->has_value()) {
      absl::Time now = absl::Now();
      if (now < idle_deadline) continue;  // a tick is due
      absl::StatusOr<bool> met = rule.InvokeWhenIdle(now - last_activity, summary.last_step);
      last_activity = now;
      if (!met.ok()) return met.status();
      if (*met) {
        auto go_on = on_issue(RuleIssue{summary.last_step, rule.last_message()});
        if (!go_on.ok()) return go_on.status();
        if (!*go_on) break;
      }
      continue;
    }
    const v1::StepEvent& event = **next;
    if (event.end_of_trial()) {
      summary.end_of_trial = true;
      break;
    }
    if (options.end_step.has_value() && event.step() >= *options.end_step) break;
    const std::vector<std::string> now_lost(event.lost_workers().begin(),
                                            event.lost_workers().end());
    if (now_lost != lost) {
      for (const std::string& w : now_lost) {
        if (std::find(lost.begin(), lost.end(), w) == lost.end()) {
          spdlog::warn(
              "rule {}: worker {} of trial '{}' is LOST: step {} and later complete "
              "without it (step {} has workers: {})",
              rule.name(), w, rule.base_trial().name(), event.step(), event.step(),
              absl::StrJoin(event.workers(), ", "));
        }
      }
      for (const std::string& w : lost) {
        if (std::find(now_lost.begin(), now_lost.end(), w) == now_lost.end()) {
          spdlog::info("rule {}: worker {} of trial '{}' is back (no longer LOST) at step {}",
                       rule.name(), w, rule.base_trial().name(), event.step());
        }
      }
      lost = now_lost;
    }
    last_activity = absl::Now();
    StepOutcome outcome;
    outcome.step.step = event.step();
    outcome.step.mode = event.mode() == v1::MODE_UNSPECIFIED ? static_cast<int>(client::kGlobal)
                                                             : static_cast<int>(event.mode());
    outcome.step.mode_step = event.mode_step();
    rule.NoteStep(outcome.step);
    summary.last_step = event.step();

    absl::StatusOr<bool> met = rule.InvokeAtStep(event.step());
    // A collector restarting fails the rule's queries for a moment: the step
    // is evaluated again, with backoff, for up to reconnect_timeout.
    absl::Duration delay = absl::Milliseconds(20);
    const absl::Time first_failure = absl::Now();
    while (!met.ok() && IsTransient(met.status()) &&
           absl::Now() - first_failure < options.reconnect_timeout) {
      spdlog::debug("rule {} at step {}: {}; evaluating the step again", rule.name(), event.step(),
                    std::string(met.status().message()));
      absl::SleepFor(delay);
      delay = std::min(delay * 2, absl::Milliseconds(500));
      met = rule.InvokeAtStep(event.step());
    }
    bool go_on = true;
    if (!met.ok()) {
      Reason reason = GetReason(met.status());
      if (reason == Reason::kNoMoreData) {
        summary.end_of_trial = true;
        break;
      }
      if (!IsSkippable(reason)) {
        return WithContext(met.status(),
                           absl::StrCat("rule ", rule.name(), " at step ", event.step(), ": "));
      }
      ++summary.steps_skipped;
      spdlog::debug("rule {}: step {} skipped: {}", rule.name(), event.step(),
                    std::string(met.status().message()));
    } else {
      ++summary.steps_evaluated;
      outcome.evaluated = true;
      outcome.issue = *met;
      spdlog::debug("rule {}: step {} evaluated: {}", rule.name(), event.step(),
                    *met ? "condition met" : "no issue");
    }
    if (outcome.issue) {
      auto r = on_issue(RuleIssue{event.step(), rule.last_message()});
      if (!r.ok()) return r.status();
      go_on = *r;
    }
    if (options.on_step) options.on_step(outcome);
    if (!go_on) break;
    if (options.end_step.has_value() && event.step() + 1 >= *options.end_step) break;
  }
  spdlog::info("Ended execution of rule {}{}", rule.name(),
               summary.last_step.has_value() ? absl::StrCat(" at step ", *summary.last_step) : "");
  return summary;
}

}  // namespace rules
}  // namespace tensorkeep
