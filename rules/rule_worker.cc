#include "rules/rule_worker.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "client/cluster.h"
#include "client/connection.h"
#include "client/trial.h"
#include "rules/invoke_rule.h"
#include "rules/registry.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace rules {
namespace {

std::string ConfigName(const RuleWorkerOptions& options) {
  return options.config_name.empty() ? options.rule : options.config_name;
}

// Sends the worker's statuses to the collector. Not thread-safe.
class StatusReporter {
 public:
  StatusReporter(client::Trial trial, std::string rule, std::string action, absl::Duration interval)
      : trial_(std::move(trial)),
        rule_(std::move(rule)),
        action_(std::move(action)),
        interval_(interval) {}

  void set_action(std::string action) { action_ = std::move(action); }
  // The outcome of the last report.
  const absl::Status& last_status() const { return last_status_; }

  // Sends `state` now. Returns whether it was stored.
  bool Report(v1::RuleStatus::State state, int64_t step = -1, const std::string& message = "") {
    v1::RuleStatus status;
    status.set_trial(trial_.name());
    status.set_rule(rule_);
    status.set_state(state);
    status.set_step(step);
    status.set_message(message);
    status.set_action(action_);
    status.set_last_evaluated_step(last_evaluated_);
    last_sent_ = absl::Now();
    absl::Status s = trial_.ReportRuleStatus(status);
    last_status_ = s;
    pending_ = !s.ok() && GetReason(s) == Reason::kTrialNotFound;
    stored_ = s.ok() ? std::make_optional(std::make_pair(state, last_evaluated_)) : std::nullopt;
    if (!s.ok() && !pending_) {
      spdlog::warn("could not report the status of rule {} on trial '{}': {}", rule_, trial_.name(),
                   std::string(s.message()));
    }
    return s.ok();
  }

  // The current state: ISSUES_FOUND once an issue was found, else IN_PROGRESS.
  bool ReportCurrent() {
    if (issue_.has_value()) {
      return Report(v1::RuleStatus::ISSUES_FOUND,
                    issue_->step.has_value() ? static_cast<int64_t>(*issue_->step) : -1,
                    issue_->message);
    }
    return Report(v1::RuleStatus::IN_PROGRESS);
  }

  // After each step: refreshes the current state when due (or when an
  // earlier report waits for the trial to exist).
  void Evaluated(uint64_t step) {
    last_evaluated_ = static_cast<int64_t>(step);
    if (pending_ || absl::Now() - last_sent_ >= interval_) ReportCurrent();
  }

  // Between steps: refreshes the current state if a step was evaluated since
  // the last report and that is due.
  void Tick() {
    bool behind = !stored_.has_value() || stored_->second != last_evaluated_;
    if (behind && !pending_ && absl::Now() - last_sent_ >= interval_) ReportCurrent();
  }

  // The first issue is reported at once; later ones only by refreshes.
  void Issue(const RuleIssue& issue) {
    if (issue.step.has_value()) last_evaluated_ = static_cast<int64_t>(*issue.step);
    if (issue_.has_value()) return;
    issue_ = issue;
    ReportCurrent();
  }

  // The final report: ISSUES_FOUND or NO_ISSUES_FOUND.
  v1::RuleStatus::State Finish() {
    if (issue_.has_value()) {
      // Unless the collector already has exactly this.
      if (stored_ != std::make_pair(v1::RuleStatus::ISSUES_FOUND, last_evaluated_)) {
        ReportCurrent();
      }
      return v1::RuleStatus::ISSUES_FOUND;
    }
    Report(v1::RuleStatus::NO_ISSUES_FOUND);
    return v1::RuleStatus::NO_ISSUES_FOUND;
  }

 private:
  client::Trial trial_;
  std::string rule_;
  std::string action_;
  absl::Duration interval_;
  int64_t last_evaluated_ = -1;
  absl::Time last_sent_ = absl::InfinitePast();
  bool pending_ = false;
  absl::Status last_status_;
  std::optional<RuleIssue> issue_;
  // The state and last evaluated step of the last report stored.
  std::optional<std::pair<v1::RuleStatus::State, int64_t>> stored_;
};

}  // namespace

void ReportWorkerError(const RuleWorkerOptions& options, const std::string& message) {
  auto connection = ConnectForTrial(options.server, options.trial, options.security);
  if (!connection.ok()) return;
  client::Trial trial(*connection, options.trial);
  StatusReporter reporter(trial, ConfigName(options), options.action, options.progress_interval);
  reporter.Report(v1::RuleStatus::ERROR, -1, message);
}

absl::StatusOr<v1::RuleStatus::State> RunRuleWorker(const RuleWorkerOptions& options) {
  const std::string name = ConfigName(options);
  if (options.action != "" && options.action != "stop") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown action '", options.action, "': use \"stop\" or none"));
  }
  // With a cluster, each trial on the collector that holds it.
  TK_ASSIGN_OR_RETURN(std::shared_ptr<Cluster> cluster,
                      Cluster::Open(options.server, options.security));
  TK_ASSIGN_OR_RETURN(std::shared_ptr<Connection> connection, cluster->Locate(options.trial));
  client::Trial trial(connection, options.trial);
  StatusReporter reporter(trial, name, options.action, options.progress_interval);
  auto fail = [&](const absl::Status& status) {
    spdlog::error("rule {} on trial '{}': {}", name, options.trial, std::string(status.message()));
    reporter.Report(v1::RuleStatus::ERROR, -1, std::string(status.message()));
    return status;
  };

  std::vector<client::Trial> others;
  for (const std::string& t : options.other_trials) {
    auto other = cluster->Locate(t);
    if (!other.ok()) return fail(other.status());
    others.emplace_back(*other, t);
  }
  auto rule = CreateRule(options.rule, options.params, trial, std::move(others));
  if (!rule.ok()) return fail(rule.status());
  if ((*rule)->StopTrainingOnFire()) reporter.set_action("stop");

  spdlog::info("rule {} ({}) on trial '{}' at {}: starting at step {}", name, options.rule,
               options.trial, connection->address(), options.from_step);
  if (!reporter.Report(v1::RuleStatus::IN_PROGRESS) &&
      (reporter.last_status().code() == absl::StatusCode::kPermissionDenied ||
       reporter.last_status().code() == absl::StatusCode::kUnauthenticated ||
       reporter.last_status().code() == absl::StatusCode::kFailedPrecondition)) {
    // A worker that may not report its findings, or that disagrees with the
    // collector about TLS, would run for nothing.
    return fail(reporter.last_status());
  }

  InvokeOptions invoke;
  invoke.start_step = options.from_step;
  invoke.reconnect_timeout = options.reconnect_timeout;
  invoke.on_step = [&](const StepOutcome& outcome) { reporter.Evaluated(outcome.step.step); };
  invoke.on_tick = [&] { reporter.Tick(); };
  invoke.tick_interval = options.progress_interval;
  invoke.on_issue = [&](const RuleIssue& issue) {
    spdlog::info("rule {} found an issue on trial '{}'{}: {}", name, options.trial,
                 issue.step.has_value() ? absl::StrCat(" at step ", *issue.step) : "",
                 issue.message);
    reporter.Issue(issue);
    return options.keep_going;
  };
  absl::StatusOr<InvokeSummary> summary = InvokeRule(**rule, invoke);
  if (!summary.ok()) return fail(summary.status());
  v1::RuleStatus::State state = reporter.Finish();
  spdlog::info("rule {} on trial '{}' done: {} ({} steps evaluated, {} skipped{})", name,
               options.trial,
               state == v1::RuleStatus::ISSUES_FOUND ? "IssuesFound" : "NoIssuesFound",
               summary->steps_evaluated, summary->steps_skipped,
               summary->end_of_trial ? ", trial ended" : "");
  return state;
}

}  // namespace rules
}  // namespace tensorkeep
