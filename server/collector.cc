#include "server/collector.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/rendezvous.h"
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
  std::unique_ptr<TrialReclaimer> reclaimer;
  {
    absl::MutexLock lock(&reclaimer_mu_);
    reclaimer = std::move(reclaimer_);
  }
  reclaimer.reset();  // outside the lock: its last job may call back
  executor_.reset();
  committer_.reset();
  notifier_->Stop();
}

absl::StatusOr<std::unique_ptr<Collector>> Collector::Create(const CollectorOptions& options,
                                                             TensorStore* store) {
  std::unique_ptr<Collector> c(new Collector(options, store));
  c->started_unix_ = c->Now();
  TK_RETURN_IF_ERROR(c->Recover());
  TrialReclaimerOptions ro;
  ro.fault_point = options.fault_point;
  if (options.retain_days > 0) {
    ro.sweep_seconds = options.retention_sweep_seconds > 0
                           ? options.retention_sweep_seconds
                           : std::clamp(options.retain_days * 86400 / 10, 0.1, 3600.0);
  }
  Collector* raw = c.get();
  absl::MutexLock lock(&c->reclaimer_mu_);
  c->reclaimer_ = std::make_unique<TrialReclaimer>(store, ro, [raw] { raw->ExpireTrials(); });
  return c;
}

double Collector::Now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

size_t Collector::reclaims_pending() const {
  absl::MutexLock lock(&reclaimer_mu_);
  return reclaimer_ == nullptr ? 0 : reclaimer_->pending();
}

void Collector::DeleteTrial(const std::string& name, const std::string& who, bool wait_reclaimed,
                            std::function<void(absl::StatusOr<v1::DeleteTrialResponse>)> done) {
  auto trial = GetTrial(name);
  if (!trial.ok()) {
    done(trial.status());
    return;
  }
  std::shared_ptr<Trial> held = *trial;
  PendingWrite w;
  w.trial = held;
  w.update.delete_trial = true;
  w.update.deleted_by = who;
  w.update.deleted_unix = Now();
  v1::DeleteTrialResponse response;
  response.set_trial(name);
  response.set_deleted_by(who);
  response.set_deleted_unix(w.update.deleted_unix);
  response.set_steps(held->StepCount());
  response.set_workers(static_cast<uint32_t>(held->Workers().size()));
  if (auto names = held->TensorNames(std::nullopt, kModeGlobal, {}, ""); names.ok()) {
    response.set_tensor_names(names->size());
  }
  w.done = [this, held, response, wait_reclaimed,
            done = std::move(done)](const absl::Status& s) mutable {
    if (!s.ok()) {
      done(s);
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      auto it = trials_.find(held->name());
      if (it != trials_.end() && it->second == held) trials_.erase(it);
    }
    spdlog::info("{} deleted trial '{}' ({} steps, {} workers, {} tensor names)",
                 response.deleted_by(), held->name(), response.steps(), response.workers(),
                 response.tensor_names());
    TrialReclaimer::Done reclaimed;
    if (wait_reclaimed) {
      reclaimed = [response, done](const absl::StatusOr<TrialReclaimer::Result>& r) mutable {
        if (!r.ok()) {
          done(absl::Status(r.status().code(),
                            absl::StrCat("trial '", response.trial(),
                                         "' is deleted, but reclaiming its space failed (it is "
                                         "retried at the collector's next start): ",
                                         r.status().message())));
          return;
        }
        response.set_reclaimed(true);
        response.set_index_bytes(r->index_bytes);
        response.set_value_bytes(r->value_bytes);
        response.set_value_files_freed_bytes(r->values.bytes_freed);
        done(response);
      };
    } else {
      done(response);
    }
    absl::MutexLock lock(&reclaimer_mu_);
    if (reclaimer_ != nullptr) {
      reclaimer_->Reclaim(held->name(), std::move(reclaimed));
    } else if (reclaimed) {
      reclaimed(absl::UnavailableError("the collector is shutting down"));
    }
  };
  Submit(std::move(w));
}

void Collector::ExpireTrials() {
  if (options_.retain_days <= 0) return;
  const double now = Now();
  const double keep = options_.retain_days * 86400;
  for (const auto& t : Trials()) {
    if (!t->ended() || t->deleted()) continue;
    double ended = t->ended_unix();
    if (ended <= 0) ended = started_unix_;  // ended before end times were recorded
    if (now - ended < keep) continue;
    const std::string name = t->name();
    spdlog::info("trial '{}' ended {:.0f} s ago, more than --retain-days {}: deleting it", name,
                 now - ended, options_.retain_days);
    DeleteTrial(name, "retention", false,
                [name](const absl::StatusOr<v1::DeleteTrialResponse>& r) {
                  if (!r.ok()) {
                    spdlog::warn("retention: deleting trial '{}': {}", name,
                                 r.status().ToString());
                  }
                });
  }
}

absl::StatusOr<std::shared_ptr<Trial>> Collector::GetTrial(const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = trials_.find(name);
  if (it == trials_.end()) {
    TK_RETURN_IF_ERROR(ValidateTrialName(name));
    return MakeError(Reason::kTrialNotFound,
                     absl::StrCat("trial '", name, "' not found on this collector"));
  }
  // Deleted, and not yet out of the map.
  if (it->second->deleted()) return it->second->NotFoundError();
  return it->second;
}

absl::StatusOr<std::shared_ptr<Trial>> Collector::GetPublishedTrial(const std::string& name,
                                                                     bool unpublished) const {
  TK_ASSIGN_OR_RETURN(auto trial, GetTrial(name));
  if (trial->unpublished() && !unpublished) {
    return MakeError(Reason::kTrialNotFound,
                     absl::StrCat("trial '", name,
                                  "' not found on this collector (a copy of it is being moved "
                                  "here by tensorkeep rebalance and is not published yet; the "
                                  "collector that holds it answers for it)"));
  }
  return trial;
}

absl::StatusOr<std::shared_ptr<Trial>> Collector::GetOrCreateTrial(const std::string& name,
                                                                   bool unpublished) {
  absl::MutexLock lock(&mu_);
  auto it = trials_.find(name);
  if (it != trials_.end() && !it->second->deleted()) {
    if (it->second->unpublished() == unpublished) return it->second;
    return absl::FailedPreconditionError(
        unpublished
            ? absl::StrCat("trial '", name,
                           "' already exists on this collector: an unpublished copy (tensorkeep "
                           "rebalance) cannot be written into it")
            : absl::StrCat("trial '", name,
                           "' is an unpublished copy being moved here by tensorkeep rebalance: "
                           "it takes no other writes; write to the collector that holds the "
                           "trial (give this client the cluster's full list)"));
  }
  // (A deleted trial still in the map is replaced: its name is free.)
  if (!options_.cluster.empty()) {
    const std::string owner = RendezvousOwner(options_.cluster, name);
    if (owner != options_.advertise) {
      return MakeError(
          Reason::kWrongCollector,
          absl::StrCat("trial ", QuoteInput(name), " belongs to the collector at ", owner,
                       ", not to this one (", options_.advertise,
                       "): every trial lives whole on the collector that owns it (rendezvous "
                       "hashing over the ",
                       options_.cluster.size(),
                       " collectors of --cluster); give this client the cluster's full list "
                       "(TENSORKEEP_SERVERS) and it writes there"));
    }
  }
  const size_t held = trials_.size() - (it != trials_.end() ? 1 : 0);
  if (held >= options_.max_trials) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the collector holds ", held, " trials, the most it may (max_trials); trial '",
        name, "' cannot be created: delete trials no longer needed, or use another collector"));
  }
  auto trial = std::make_shared<Trial>(name, notifier_);
  trial->SetUnpublished(unpublished);
  trials_[name] = trial;
  // The trial list's event streams (Notifier::WatchTrials) show it at once.
  if (notifier_->trials_watched()) notifier_->Signal(trial);
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

v1::TrialSummary Collector::SummaryOf(const Trial& trial) const {
  v1::TrialSummary summary = trial.Summary();
  MarkConnected(trial.name(), summary.mutable_worker_statuses());
  return summary;
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
  for (const auto& [name, t] : trials_) {
    if (!t->deleted()) out.push_back(t);
  }
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

void Collector::PublishTrial(const std::string& name,
                             std::function<void(absl::StatusOr<v1::TrialSummary>)> done) {
  auto trial = GetTrial(name);
  if (!trial.ok()) {
    done(trial.status());
    return;
  }
  if (!(*trial)->unpublished()) {
    done(SummaryOf(**trial));
    return;
  }
  PendingWrite w;
  w.trial = *trial;
  w.update.publish = true;
  std::shared_ptr<Trial> held = *trial;
  w.done = [this, held, done = std::move(done)](const absl::Status& s) {
    if (!s.ok()) {
      done(s);
      return;
    }
    held->SetUnpublished(false);
    spdlog::info("trial '{}' published", held->name());
    done(SummaryOf(*held));
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

void Collector::PutCollections(
    const v1::PutCollectionsRequest& request, bool unpublished,
    std::function<void(absl::StatusOr<v1::PutCollectionsResponse>)> done) {
  auto trial = [&]() -> absl::StatusOr<std::shared_ptr<Trial>> {
    TK_RETURN_IF_ERROR(ValidatePutCollections(request));
    if (auto existing = GetTrial(request.trial()); existing.ok() && (*existing)->ended()) {
      return absl::FailedPreconditionError(
          absl::StrCat("trial '", request.trial(),
                       "' has ended: its collections can no longer change"));
    }
    return GetOrCreateTrial(request.trial(), unpublished);
  }();
  if (!trial.ok()) {
    done(trial.status());
    return;
  }
  auto stored = std::make_shared<storage::WorkerCollections>(ToStored(request));
  stored->set_updated_unix(Now());
  PendingWrite w;
  w.trial = *trial;
  w.update.collections = std::move(stored);
  w.update.collections_worker = request.worker();
  w.done = [t = *trial, done = std::move(done)](const absl::Status& s) {
    if (!s.ok()) {
      done(s);
      return;
    }
    v1::PutCollectionsResponse response;
    response.set_collections(static_cast<uint32_t>(CollectionCount(t->CollectionConfigsByWorker())));
    done(response);
  };
  Submit(std::move(w));
}

}  // namespace tensorkeep
