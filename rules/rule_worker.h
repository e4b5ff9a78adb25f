// RuleWorker: runs one rule on one trial against a collector and reports
// its status there, as SageMaker's rule evaluation jobs do — the core of the
// tensorkeep-rules binary.
//
// The worker creates the rule (a built-in rule by name), reports IN_PROGRESS,
// and invokes the rule at each complete step (InvokeRule over WatchSteps).
// While it runs it refreshes IN_PROGRESS with the last evaluated step about
// every `progress_interval` (not at every step: steps may be fast). When
// the rule fires it reports ISSUES_FOUND (step, message, action) and stops,
// unless keep_going; when the trial ends without an issue it reports
// NO_ISSUES_FOUND; on failure ERROR (message). Reports that fail because the
// trial does not exist yet are sent again once it does; other failed reports
// are logged and do not stop the worker. Each worker reports under its own
// rule configuration name, so several may watch one trial.
//
// Thread safety: RunRuleWorker may be called from several threads at once,
// each with its own options.
#ifndef TENSORKEEP_RULES_RULE_WORKER_H_
#define TENSORKEEP_RULES_RULE_WORKER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/credentials.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace rules {

struct RuleWorkerOptions {
  // Collector address (HOST:PORT), or a cluster's HOST:PORT,HOST:PORT,...
  // (each trial is read from the collector that holds it); empty:
  // $TENSORKEEP_SERVERS, else $TENSORKEEP_SERVER, else the default.
  std::string server;
  // TLS and token; empty fields from the environment (client/credentials.h).
  ClientSecurity security;
  std::string trial;
  // A built-in rule's name (rules/registry.h).
  std::string rule;
  std::map<std::string, std::string> params;
  // Trials the rule may compare with (SimilarAcrossRuns).
  std::vector<std::string> other_trials;
  // "" or "stop": with "stop", ISSUES_FOUND makes the collector ask the
  // trial's writers to stop.
  std::string action;
  // First global step to evaluate.
  uint64_t from_step = 0;
  // The rule configuration name statuses are reported under; empty: `rule`.
  std::string config_name;
  // Go on after an issue (reporting ISSUES_FOUND) until the trial ends.
  bool keep_going = false;
  // Least time between two IN_PROGRESS refreshes.
  absl::Duration progress_interval = absl::Seconds(1);
  // Give up when the collector was unreachable for this long.
  absl::Duration reconnect_timeout = absl::Seconds(60);
};

// Runs the worker until it is done. Returns the final state it reported,
// NO_ISSUES_FOUND or ISSUES_FOUND; or the error that ended it, after
// reporting ERROR with its message (best effort).
absl::StatusOr<v1::RuleStatus::State> RunRuleWorker(const RuleWorkerOptions& options);

// Reports ERROR with `message` for the worker configured by `options` (best
// effort: failures are logged). For failures outside RunRuleWorker, such as
// a signal.
void ReportWorkerError(const RuleWorkerOptions& options, const std::string& message);

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_RULE_WORKER_H_
