#include "server/collector.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/stored_record.h"
#include "server/validation.h"
#include "spdlog/spdlog.h"
#include "storage/keys.h"
#include "storage/record_block.h"
#include "tensor/dtype.h"
#include "tensor/histogram.h"
#include "tensor/reductions.h"

namespace tensorkeep {

Collector::Collector(const CollectorOptions& options, TensorStore* store)
    : options_(options),
      store_(store),
      memory_(options.memory_budget_bytes),
      cache_memory_(
          memory_.Hold(std::min(options.value_cache_bytes, options.memory_budget_bytes / 4))),
      value_cache_(cache_memory_.bytes()),
      notifier_(std::make_shared<Notifier>(
          NotifierOptions{options.max_watchers, options.max_trial_watchers})),
      registry_(std::make_unique<WorkerRegistry>(
          WorkerRegistryOptions{absl::Seconds(options.worker_timeout_seconds),
                                options.max_push_streams},
          [this](const std::string& trial, const std::string& worker, uint64_t generation) {
            OnWorkerTimeout(trial, worker, generation);
          })),
      executor_(std::make_unique<Executor>(
          ExecutorOptions{options.executor_threads, options.executor_max_queued})) {}

Collector::~Collector() {
  registry_->Stop();
  executor_.reset();
  committer_.reset();
  notifier_->Stop();
}

absl::StatusOr<std::unique_ptr<Collector>> Collector::Create(const CollectorOptions& options,
                                                             TensorStore* store) {
  std::unique_ptr<Collector> c(new Collector(options, store));
  TK_RETURN_IF_ERROR(c->Recover());
  return c;
}

absl::StatusOr<std::shared_ptr<Trial>> Collector::GetTrial(const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = trials_.find(name);
  if (it == trials_.end()) {
    TK_RETURN_IF_ERROR(ValidateTrialName(name));
    return MakeError(Reason::kTrialNotFound,
                     absl::StrCat("trial '", name, "' not found on this collector"));
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<Trial>> Collector::GetOrCreateTrial(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = trials_.find(name);
  if (it != trials_.end()) return it->second;
  if (trials_.size() >= options_.max_trials) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the collector holds ", trials_.size(), " trials, the most it may (max_trials); trial '",
        name, "' cannot be created: delete trials no longer needed, or use another collector"));
  }
  auto trial = std::make_shared<Trial>(name, notifier_);
  trials_.emplace(name, trial);
  return trial;
}

absl::StatusOr<uint64_t> Collector::ClaimWriter(const std::string& trial,
                                                const std::string& worker, bool resume) {
  return registry_->Claim(trial, worker, resume);
}

void Collector::ReleaseWriter(const std::string& trial, const std::string& worker, uint64_t id) {
  registry_->Release(trial, worker, id);
}

std::vector<v1::WorkerStatus> Collector::WorkerStatuses(const Trial& trial) const {
  std::vector<v1::WorkerStatus> out = trial.WorkerStatuses();
  for (auto& s : out) s.set_connected(registry_->Connected(trial.name(), s.worker()));
  return out;
}

void Collector::MarkConnected(
    const std::string& trial,
    google::protobuf::RepeatedPtrField<v1::WorkerStatus>* statuses) const {
  for (auto& s : *statuses) s.set_connected(registry_->Connected(trial, s.worker()));
}

namespace {

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

void Collector::OnWorkerTimeout(const std::string& trial, const std::string& worker,
                                uint64_t generation) {
  auto t = GetTrial(trial);
  if (!t.ok()) return;
  PendingWrite w;
  w.trial = *t;
  w.update.worker = worker;
  w.update.change = WorkerChange::kTimedOut;
  w.update.lost_reason =
      absl::StrCat("no Push stream for ", options_.worker_timeout_seconds, " s (--worker-timeout)");
  w.update.lost_unix = NowUnix();
  WorkerRegistry* registry = registry_.get();
  w.precondition = [registry, trial, worker, generation] {
    return registry->StillGone(trial, worker, generation);
  };
  w.done = [trial, worker](const absl::Status& s) {
    if (!s.ok()) {
      spdlog::error("trial '{}': could not record worker '{}' as lost: {}", trial, worker,
                    s.ToString());
    }
  };
  Submit(std::move(w));
}

void Collector::DeclareWorkerLost(const std::string& trial, const std::string& worker,
                                  std::function<void(absl::StatusOr<v1::WorkerStatus>)> done) {
  auto t = GetTrial(trial);
  if (!t.ok()) {
    done(t.status());
    return;
  }
  if (absl::Status valid = ValidateWorkerName(worker); !valid.ok()) {
    done(valid);
    return;
  }
  PendingWrite w;
  w.trial = *t;
  w.update.worker = worker;
  w.update.change = WorkerChange::kDeclaredLost;
  w.update.lost_reason = "declared lost by an operator";
  w.update.lost_unix = NowUnix();
  std::shared_ptr<Trial> held = *t;
  w.done = [this, held, worker, done = std::move(done)](const absl::Status& s) {
    if (!s.ok()) {
      done(s);
      return;
    }
    for (const v1::WorkerStatus& status : WorkerStatuses(*held)) {
      if (status.worker() == worker) {
        done(status);
        return;
      }
    }
    done(absl::InternalError(absl::StrCat("worker '", worker, "' vanished from the index")));
  };
  Submit(std::move(w));
}

std::vector<std::shared_ptr<Trial>> Collector::Trials() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::shared_ptr<Trial>> out;
  for (const auto& [name, t] : trials_) out.push_back(t);
  return out;
}

void Collector::EndTrial(const std::string& name, std::function<void(absl::StatusOr<bool>)> done) {
  auto trial = GetTrial(name);
  if (!trial.ok()) {
    done(trial.status());
    return;
  }
  const bool was_running = !(*trial)->ended();
  PendingWrite w;
  w.trial = *trial;
  w.update.end_trial = true;
  w.done = [name, was_running, done = std::move(done)](const absl::Status& s) {
    if (!s.ok()) {
      done(s);
      return;
    }
    if (was_running) spdlog::info("trial '{}' ended on request", name);
    done(was_running);
  };
  Submit(std::move(w));
}

void Collector::ReportRuleStatus(v1::RuleStatus status,
                                 std::function<void(absl::StatusOr<v1::RuleStatus>)> done) {
  // Checked here, before the write is queued.
  auto trial = [&]() -> absl::StatusOr<std::shared_ptr<Trial>> {
    TK_ASSIGN_OR_RETURN(auto t, GetTrial(status.trial()));
    TK_RETURN_IF_ERROR(ValidateWorkerName(status.rule()));
    if (status.state() < v1::RuleStatus::IN_PROGRESS || status.state() > v1::RuleStatus::ERROR) {
      return MakeError(Reason::kBadRequest,
                       "rule state must be IN_PROGRESS, NO_ISSUES_FOUND, ISSUES_FOUND or ERROR");
    }
    if (!status.action().empty() && status.action() != "stop") {
      return MakeError(Reason::kBadRequest,
                       absl::StrCat("unknown rule action ", QuoteInput(status.action()),
                                    ": use \"stop\" or none"));
    }
    if (status.message().size() > kMaxRuleMessageBytes) {
      return MakeError(Reason::kBadRequest,
                       absl::StrCat("rule status message is ", status.message().size(),
                                    " bytes long; the limit is ", kMaxRuleMessageBytes));
    }
    return t;
  }();
  if (!trial.ok()) {
    done(trial.status());
    return;
  }
  status.set_updated_unix(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  PendingWrite w;
  w.trial = *trial;
  w.update.rule_status = status;
  w.done = [status, done = std::move(done)](const absl::Status& s) {
    if (!s.ok()) {
      done(s);
      return;
    }
    if (status.state() == v1::RuleStatus::ISSUES_FOUND) {
      spdlog::info("trial '{}': rule '{}' found an issue at step {}: {}{}", status.trial(),
                   status.rule(), status.step(), status.message(),
                   status.action() == "stop" ? " (stop requested)" : "");
    }
    done(status);
  };
  Submit(std::move(w));
}

}  // namespace tensorkeep
