// tensorkeep-rules: the rule worker. Runs one rule on one trial of a
// collector, as the steps complete, and reports its status there.
//
//   tensorkeep-rules --server ADDR --trial T --rule NAME [--param k=v ...]
//       [--other-trial T2] [--action stop] [--from-step N] [--name CONFIG]
//       [--keep-going] [--log-level LEVEL]
//
// Exit status: 0 when the rule found an issue or the trial ended without
// one; 1 on failure (reported as ERROR); 2 on a usage error.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cluster.h"
#include "client/connection.h"
#include "rules/params.h"
#include "rules/registry.h"
#include "rules/rule_worker.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

using tensorkeep::rules::RuleWorkerOptions;

std::string Usage() {
  std::string s = absl::StrCat(
      "usage: tensorkeep-rules --trial TRIAL --rule NAME [options]\n"
      "\n"
      "Runs one rule on a trial as its steps complete, and reports the rule's status\n"
      "(InProgress, IssuesFound, NoIssuesFound, Error) to the collector.\n"
      "\n"
      "options:\n"
      "  --server HOST:PORT   the collector (default: $",
      tensorkeep::kServersEnv, ", else $", tensorkeep::kServerEnv, ", else ",
      tensorkeep::kDefaultServer,
      "); repeated or HOST:PORT,HOST:PORT,...: a cluster's collectors\n"
      "  --trial TRIAL        the trial to watch (required)\n"
      "  --rule NAME          the built-in rule to run (required; see below)\n"
      "  --param K=V          a rule parameter, as a string (repeatable)\n"
      "  --other-trial TRIAL  a trial to compare with (SimilarAcrossRuns; repeatable)\n"
      "  --action stop        when the rule fires, ask the trial's writers to stop\n"
      "  --from-step N        first global step to evaluate (default 0)\n"
      "  --name NAME          the rule configuration name to report under\n"
      "                       (default: the rule's name; must be unique per trial)\n"
      "  --keep-going         go on after an issue until the trial ends\n"
      "  --log-level LEVEL    trace, debug, info (default), warn, error, off\n"
      "  --help               this text\n",
      tensorkeep::ClientSecurityUsage(),
      "\n"
      "Exit status: 0 when the rule found an issue or the trial ended without one,\n"
      "1 on failure (reported as Error), 2 on a usage error.\n"
      "\n"
      "built-in rules (parameters and defaults: docs/rules.md):\n");
  for (const auto& r : tensorkeep::rules::BuiltinRules()) {
    s += absl::StrCat("  ", r.name, std::string(r.name.size() < 26 ? 26 - r.name.size() : 1, ' '),
                      r.summary, "\n");
  }
  return s;
}

int UsageError(const std::string& message) {
  std::cerr << "tensorkeep-rules: " << message << "\n(--help for usage)\n";
  return 2;
}

bool ValidConfigName(const std::string& name) {
  if (name.empty() || name.size() > 256) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  RuleWorkerOptions options;
  std::string log_level = "info";
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    auto take = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= args.size()) return false;
      value = args[++i];
      return true;
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << Usage();
      return 0;
    } else if (flag == "--keep-going") {
      options.keep_going = true;
    } else if (flag == "--server" || flag == "--trial" || flag == "--rule" || flag == "--param" ||
               flag == "--other-trial" || flag == "--action" || flag == "--from-step" ||
               flag == "--name" || flag == "--log-level" || flag == "--tls-ca" ||
               flag == "--tls-cert" || flag == "--tls-key" || flag == "--token") {
      if (!take()) return UsageError(flag + " needs a value");
      if (flag == "--server") {
        // Repeatable: a cluster's collectors.
        options.server = options.server.empty() ? value : options.server + "," + value;
      } else if (flag == "--trial") {
        options.trial = value;
      } else if (flag == "--rule") {
        options.rule = value;
      } else if (flag == "--param") {
        auto kv = tensorkeep::rules::ParseParamAssignment(value);
        if (!kv.ok()) return UsageError(std::string(kv.status().message()));
        options.params[kv->first] = kv->second;
      } else if (flag == "--other-trial") {
        options.other_trials.push_back(value);
      } else if (flag == "--action") {
        if (value != "stop" && !value.empty()) {
          return UsageError("unknown --action '" + value + "': the only action is stop");
        }
        options.action = value;
      } else if (flag == "--from-step") {
        if (!absl::SimpleAtoi(value, &options.from_step)) {
          return UsageError("--from-step needs a step number, not '" + value + "'");
        }
      } else if (flag == "--name") {
        options.config_name = value;
      } else if (flag == "--tls-ca") {
        options.security.tls_ca = value;
      } else if (flag == "--tls-cert") {
        options.security.tls_cert = value;
      } else if (flag == "--tls-key") {
        options.security.tls_key = value;
      } else if (flag == "--token") {
        options.security.token = value;
      } else {
        log_level = value;
      }
    } else {
      return UsageError("unknown argument '" + args[i] + "'");
    }
  }
  if (options.trial.empty()) return UsageError("--trial is required");
  if (options.rule.empty()) return UsageError("--rule is required");
  const std::string config = options.config_name.empty() ? options.rule : options.config_name;
  if (!ValidConfigName(config)) {
    return UsageError("rule configuration name '" + config +
                      "' must be 1-256 characters of [A-Za-z0-9._:/-]");
  }

  auto logger = spdlog::stderr_color_mt("tensorkeep-rules");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [%^%l%$] %v");
  auto level = spdlog::level::from_str(log_level);
  if (level == spdlog::level::off && log_level != "off") {
    return UsageError("unknown --log-level '" + log_level + "'");
  }
  spdlog::set_level(level);

  // SIGINT / SIGTERM: report ERROR, then exit. Blocked before any thread
  // starts, so that only the signal thread receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals, options] {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) return;
    std::string message =
        absl::StrCat("rule worker stopped by signal ", sig == SIGINT ? "SIGINT" : "SIGTERM");
    spdlog::warn("{}", message);
    tensorkeep::rules::ReportWorkerError(options, message);
    spdlog::default_logger()->flush();
    std::_Exit(128 + sig);
  }).detach();

  auto state = tensorkeep::rules::RunRuleWorker(options);
  spdlog::default_logger()->flush();
  if (!state.ok()) return 1;
  return 0;
}
