#include "server/committer.h"

#include <chrono>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "server/validation.h"
#include "server/worker_attempts.h"
#include "spdlog/spdlog.h"
#include "storage/keys.h"

namespace tensorkeep {

Committer::Committer(TensorStore* store, bool sync,
                     std::map<std::string, storage::TrialMeta> trials,
                     std::map<std::pair<std::string, std::string>, storage::WorkerMeta> workers,
                     size_t max_steps_per_trial, const std::atomic<uint64_t>* next_block_id,
                     std::function<double()> clock)
    : store_(store),
      sync_(sync),
      max_steps_per_trial_(max_steps_per_trial),
      next_block_id_(next_block_id),
      clock_(std::move(clock)),
      trial_meta_(std::move(trials)),
      worker_meta_(std::move(workers)) {
  for (const auto& [id, meta] : worker_meta_) ++worker_counts_[id.first];
  thread_ = std::thread([this] { Run(); });
}

Committer::~Committer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Committer::Submit(PendingWrite write) {
  write.submitted = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  if (write.batch != nullptr) queued_bytes_ += write.batch->ApproximateSize();
  queue_.push_back(std::move(write));
}

size_t Committer::queued_bytes() const {
  absl::MutexLock lock(&mu_);
  return queued_bytes_;
}

namespace {

// The group's copy of `key`'s metadata: the staged one, else a copy of the
// durable one, else a new one (then *created is set).
template <typename Map>
typename Map::mapped_type& StagedCopy(Map* staged, const Map& durable,
                                      const typename Map::key_type& key, bool* created) {
  auto it = staged->find(key);
  if (it != staged->end()) return it->second;
  auto d = durable.find(key);
  if (d == durable.end()) {
    *created = true;
    return staged->emplace(key, typename Map::mapped_type()).first->second;
  }
  return staged->emplace(key, d->second).first->second;
}

}  // namespace

absl::Status Committer::CheckSteps(const PendingWrite& write, const Staged& staged,
                                   size_t* fresh) const {
  *fresh = 0;
  const std::string& trial = write.trial->name();
  const IndexedRecord* previous = nullptr;
  // Records come grouped by step (WriteSession sorts them), one mode a step.
  for (const IndexedRecord& r : write.update.records) {
    if (previous != nullptr && previous->step == r.step) continue;
    previous = &r;
    std::optional<StepInfo> known;
    if (auto it = staged.steps.find({trial, r.step}); it != staged.steps.end()) {
      known = it->second;
    } else {
      known = write.trial->GetStep(r.step);
    }
    if (known.has_value() && (known->mode != r.mode || known->mode_step != r.mode_step)) {
      return MakeError(Reason::kConflict,
                       absl::StrCat("step ", r.step, " of trial '", trial, "' is ",
                                    ModeName(known->mode), " step ", known->mode_step, "; worker '",
                                    write.update.worker, "' wrote tensor '", r.name, "' as ",
                                    ModeName(r.mode), " step ", r.mode_step));
    }
    if (!known.has_value()) ++*fresh;
    if (IsGlobalMode(r.mode) || known.has_value()) continue;
    std::optional<uint64_t> global;
    if (auto it = staged.mode_steps.find({trial, r.mode, r.mode_step});
        it != staged.mode_steps.end()) {
      global = it->second;
    } else {
      global = write.trial->FindGlobalStep(r.mode, r.mode_step);
    }
    if (global.has_value() && *global != r.step) {
      return MakeError(Reason::kConflict,
                       absl::StrCat(ModeName(r.mode), " step ", r.mode_step, " of trial '", trial,
                                    "' is global step ", *global, "; worker '", write.update.worker,
                                    "' wrote tensor '", r.name, "' as global step ", r.step));
    }
  }
  return absl::OkStatus();
}

const storage::WorkerMeta* Committer::FindWorker(const Staged& staged, const WorkerId& id) const {
  if (auto it = staged.workers.find(id); it != staged.workers.end()) return &it->second;
  if (auto it = worker_meta_.find(id); it != worker_meta_.end()) return &it->second;
  return nullptr;
}

bool Committer::AllWorkersGone(const std::string& trial, const Staged& staged,
                               uint32_t expected) const {
  const auto gone = [](const storage::WorkerMeta& m) { return m.closed() || m.lost(); };
  const WorkerId first{trial, ""};
  size_t n = 0;
  for (auto it = worker_meta_.lower_bound(first);
       it != worker_meta_.end() && it->first.first == trial; ++it) {
    ++n;
    auto s = staged.workers.find(it->first);
    if (!gone(s != staged.workers.end() ? s->second : it->second)) return false;
  }
  for (auto it = staged.workers.lower_bound(first);
       it != staged.workers.end() && it->first.first == trial; ++it) {
    if (worker_meta_.count(it->first) != 0) continue;  // counted above
    ++n;
    if (!gone(it->second)) return false;
  }
  return n > 0 && n >= expected;
}

absl::Status Committer::Stage(const PendingWrite& write, Staged* staged,
                              std::unique_ptr<TensorStore::Batch>* meta_batch, bool* noop) {
  const auto put = [&](const std::string& key, const google::protobuf::Message& m) {
    if (*meta_batch == nullptr) *meta_batch = store_->NewBatch();
    (*meta_batch)->Put(key, m.SerializeAsString());
  };
  const TrialUpdate& u = write.update;
  const std::string& trial = write.trial->name();

  // Checks first: a refused write stages nothing.
  // A deleted trial takes nothing more (a new trial of its name is another
  // Trial object, made once the deletion is durable).
  if (write.trial->deleted()) {
    return u.delete_trial ? write.trial->NotFoundError() : write.trial->DeletedError();
  }
  if (auto d = staged->deleted.find(trial); d != staged->deleted.end()) {
    if (u.delete_trial) {
      return MakeError(Reason::kTrialNotFound,
                       absl::StrCat("trial '", trial, "' not found on this collector (deleted by ",
                                    d->second.first, ")"));
    }
    return TrialDeletedError(trial, d->second.first, d->second.second);
  }
  if (u.delete_trial) {
    StageDeletion(write, staged, meta_batch);
    return absl::OkStatus();
  }
  const WorkerId wid{trial, u.worker};
  const storage::WorkerMeta* known = u.worker.empty() ? nullptr : FindWorker(*staged, wid);
  const bool new_worker = !u.worker.empty() && known == nullptr;
  const auto worker_count = [&]() -> uint32_t {
    auto count = staged->worker_counts.find(trial);
    return count != staged->worker_counts.end() ? count->second : worker_counts_[trial];
  };
  if (u.change == WorkerChange::kTimedOut || u.change == WorkerChange::kDeclaredLost) {
    const bool declared = u.change == WorkerChange::kDeclaredLost;
    if (known == nullptr && declared) {
      return MakeError(
          Reason::kInvalidWorker,
          absl::StrCat("worker '", u.worker, "' never wrote to trial '", trial,
                       "'; its workers are listed by `tensorkeep workers ", trial, "`"));
    }
    if (known != nullptr && known->closed() && declared) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker '", u.worker, "' of trial '", trial,
                       "' closed with end-of-training: it is CLOSED, not lost, and no step "
                       "waits for it"));
    }
    if (known == nullptr || known->closed() || known->lost() ||
        (write.precondition && !write.precondition())) {
      *noop = true;  // already gone, or back since its timeout passed
      return absl::OkStatus();
    }
  }
  // A writer of an attempt a newer one superseded (a restart of its job)
  // writes nothing more (only a Push stream's writes carry an attempt).
  if (known != nullptr && write.stream != nullptr && u.attempt < known->attempt()) {
    return MakeError(Reason::kConflict, SupersededMessage(trial, u.worker, u.attempt,
                                                          known->attempt()));
  }
  const bool restart = known != nullptr && u.change == WorkerChange::kOpened &&
                       u.attempt > known->attempt();
  if (restart) {
    const storage::TrialMeta* tm = nullptr;
    if (auto it = staged->trials.find(trial); it != staged->trials.end()) {
      tm = &it->second;
    } else if (auto d = trial_meta_.find(trial); d != trial_meta_.end()) {
      tm = &d->second;
    }
    if (tm != nullptr && tm->ended()) {
      return MakeError(Reason::kConflict, RestartAfterEndMessage(trial, u.worker, u.attempt));
    }
  }
  if (u.change == WorkerChange::kOpened && worker_count() > 0) {
    // Writers of a trial must agree on how many workers it has: a writer
    // that counts differently would make steps complete too early or never.
    const storage::TrialMeta* tm = nullptr;
    if (auto it = staged->trials.find(trial); it != staged->trials.end()) {
      tm = &it->second;
    } else if (auto d = trial_meta_.find(trial); d != trial_meta_.end()) {
      tm = &d->second;
    }
    if (tm != nullptr && tm->num_workers() != u.num_workers) {
      return MakeError(
          Reason::kConflict,
          absl::StrCat("worker '", u.worker, "' opened trial '", trial, "' with num_workers ",
                       u.num_workers, ", but its writers declared num_workers ", tm->num_workers(),
                       ": every writer of a trial must declare the same number of "
                       "workers (the world size), or write to another trial"));
    }
  }
  if (new_worker) {
    const uint32_t n = worker_count();
    if (n >= kMaxWorkers) {
      return absl::ResourceExhaustedError(absl::StrCat("trial '", trial, "' already has ", n,
                                                       " workers, the most one trial may "
                                                       "have; worker '",
                                                       u.worker,
                                                       "' is refused (use fewer distinct worker "
                                                       "names, e.g. one per rank)"));
    }
  }
  size_t fresh = 0;
  if (!u.records.empty()) {
    // Names of this group's earlier writes are counted again if they repeat:
    // an over-count only matters at the limit.
    size_t held = 0;
    fresh = write.trial->CountNewNames(u.records, &held);
    if (fresh > 0) {
      const size_t pending = staged->new_names[trial];
      if (held + pending + fresh > kMaxTensorNamesPerTrial) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "trial '", trial, "' holds ", held + pending, " tensor names; ", fresh,
            " more would pass the limit of ", kMaxTensorNamesPerTrial,
            " names a trial (proto/limits.proto): save fewer distinct names, e.g. reduce a "
            "tensor's name variants, or split the run into several trials"));
      }
    }
  }
  size_t fresh_steps = 0;
  absl::Status steps_ok = CheckSteps(write, *staged, &fresh_steps);
  if (!steps_ok.ok()) return steps_ok;
  if (fresh_steps > 0) {
    const size_t held = write.trial->StepCount() + staged->new_steps[trial];
    if (held + fresh_steps > max_steps_per_trial_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "trial '", trial, "' holds ", held, " steps; ", fresh_steps,
          " more would pass the limit of ", max_steps_per_trial_,
          " steps a trial (proto/limits.proto MAX_STEPS_PER_TRIAL): save less often (a larger "
          "save interval), or continue the run in a new trial"));
    }
    staged->new_steps[trial] += fresh_steps;
  }
  if (fresh > 0) staged->new_names[trial] += fresh;

  const IndexedRecord* previous = nullptr;
  for (const IndexedRecord& r : u.records) {
    if (previous != nullptr && previous->step == r.step) continue;
    previous = &r;
    staged->steps.emplace(std::make_pair(trial, r.step), StepInfo{r.mode, r.mode_step});
    if (!IsGlobalMode(r.mode)) {
      staged->mode_steps.emplace(std::make_tuple(trial, r.mode, r.mode_step), r.step);
    }
  }

  if (u.collections != nullptr) {
    const storage::TrialMeta* known_tm = nullptr;
    if (auto it = staged->trials.find(trial); it != staged->trials.end()) {
      known_tm = &it->second;
    } else if (auto d = trial_meta_.find(trial); d != trial_meta_.end()) {
      known_tm = &d->second;
    }
    if (known_tm != nullptr && known_tm->ended()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trial '", trial, "' has ended: its collections can no longer change (worker '",
          u.collections_worker, "')"));
    }
    CollectionConfigs view = write.trial->CollectionConfigsByWorker();
    for (const auto& [w, c] : staged->collections[trial]) view[w] = c;
    view[u.collections_worker] = u.collections;
    const size_t bytes = ConfigBytes(view);
    const size_t count = CollectionCount(view);
    if (bytes > kMaxCollectionConfigBytes || count > kMaxCollections) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "trial '", trial, "' would hold ", count, " collections in ", bytes,
          " bytes of configuration with what worker '", u.collections_worker,
          "' sent; the limits are ", kMaxCollections, " collections and ", kMaxCollectionConfigBytes,
          " bytes a trial, all workers together (proto/limits.proto): configure fewer or "
          "smaller collections"));
    }
  }

  bool trial_changed = false;
  storage::TrialMeta& tm = StagedCopy(&staged->trials, trial_meta_, trial, &trial_changed);
  const double now =
      clock_ ? clock_()
             : std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                   .count();
  if (trial_changed) {  // a new trial
    tm.set_num_workers(1);
    tm.set_created_unix(now);
    tm.set_unpublished(write.trial->unpublished());
  }
  if (u.publish && tm.unpublished()) {
    tm.set_unpublished(false);
    trial_changed = true;
  }
  if (u.num_workers > tm.num_workers()) {
    tm.set_num_workers(u.num_workers);
    trial_changed = true;
  }
  if (u.end_trial && !tm.ended()) {
    tm.set_ended(true);
    tm.set_ended_unix(now);
    staged->ended.emplace_back(write.trial, now);
    trial_changed = true;
  }
  if (u.rule_status.has_value()) {
    const v1::RuleStatus& rs = *u.rule_status;
    put(RuleKey(trial, rs.rule()), rs);
    staged->rules[trial].insert(rs.rule());
    if (rs.action() == "stop" && rs.state() == v1::RuleStatus::ISSUES_FOUND &&
        !tm.stop_requested()) {
      tm.set_stop_requested(true);
      trial_changed = true;
    }
  }

  if (u.collections != nullptr) {
    put(CollectionsKey(trial, u.collections_worker), *u.collections);
    staged->collections[trial][u.collections_worker] = u.collections;
  }

  if (!u.worker.empty()) {
    bool worker_changed = false;
    bool gone = false;  // the worker became CLOSED or LOST
    storage::WorkerMeta& wm = StagedCopy(&staged->workers, worker_meta_, wid, &worker_changed);
    // A worker that appears, or comes back from LOST, has not committed the
    // steps complete so far: record them, so that they stay complete after a
    // restart (the tracker then recomputes from the workers' commits).
    bool awaited_again = worker_changed || (u.change == WorkerChange::kOpened && wm.lost());
    if (worker_changed) {  // a new worker
      wm.set_committed_through(StepTracker::kNone);
      auto count = staged->worker_counts.find(trial);
      if (count == staged->worker_counts.end()) {
        count = staged->worker_counts.emplace(trial, worker_counts_[trial]).first;
      }
      ++count->second;
    }
    if (worker_changed) {
      wm.set_attempt(u.attempt);  // a new worker starts at its writer's attempt
    } else if (restart) {
      storage::WorkerRestart* r = wm.add_restarts();
      r->set_attempt(u.attempt);
      r->set_started_unix(u.restart_unix);
      r->set_previous_committed_through(wm.committed_through());
      if (static_cast<size_t>(wm.restarts_size()) > kMaxRecordedRestarts) {
        wm.mutable_restarts()->DeleteSubrange(0, 1);
      }
      staged->logs.push_back(absl::StrCat(
          "trial '", trial, "': worker '", u.worker, "' restarted as attempt ", u.attempt,
          " (attempt ", wm.attempt(), " had committed ",
          wm.committed_through() < 0 ? std::string("no step")
                                     : absl::StrCat("through step ", wm.committed_through()),
          wm.closed() ? ", and closed" : "", wm.lost() ? ", and was LOST" : "",
          "); the steps it writes again replace the earlier attempt's"));
      wm.set_attempt(u.attempt);
      wm.set_committed_through(StepTracker::kNone);
      wm.set_closed(false);
      wm.set_lost(false);
      wm.clear_lost_reason();
      wm.set_lost_unix(0);
      awaited_again = true;
      worker_changed = true;
    }
    if (u.committed_through > wm.committed_through()) {
      wm.set_committed_through(u.committed_through);
      worker_changed = true;
    }
    if (u.finished && !wm.closed()) {
      wm.set_closed(true);
      wm.set_lost(false);
      wm.clear_lost_reason();
      wm.set_lost_unix(0);
      worker_changed = gone = true;
    }
    if ((u.change == WorkerChange::kTimedOut || u.change == WorkerChange::kDeclaredLost) &&
        !wm.closed() && !wm.lost()) {
      wm.set_lost(true);
      wm.set_lost_reason(u.lost_reason);
      wm.set_lost_unix(u.lost_unix);
      worker_changed = gone = true;
      staged->logs.push_back(absl::StrCat("trial '", trial, "': worker '", u.worker, "' is LOST (",
                                          u.lost_reason, "); later steps complete without it"));
    }
    if (u.change == WorkerChange::kOpened && wm.lost()) {  // (a restart cleared it)
      wm.set_lost(false);
      wm.clear_lost_reason();
      wm.set_lost_unix(0);
      worker_changed = true;
      staged->logs.push_back(
          absl::StrCat("trial '", trial, "': worker '", u.worker, "' is back: ACTIVE again"));
    }
    if (awaited_again && !tm.ended()) {
      const int64_t through = write.trial->CompleteThrough();
      if (through != StepTracker::kNone && through != StepTracker::kAll &&
          static_cast<uint64_t>(through) + 1 > tm.complete_below()) {
        tm.set_complete_below(static_cast<uint64_t>(through) + 1);
        trial_changed = true;
      }
    }
    if (worker_changed) put(WorkerKey(trial, u.worker), wm);
    if (gone && !tm.ended() && AllWorkersGone(trial, *staged, tm.num_workers())) {
      // Final, as the tracker's end: a LOST worker coming back later does
      // not make the trial run again.
      tm.set_ended(true);
      tm.set_ended_unix(now);
      staged->ended.emplace_back(write.trial, now);
      trial_changed = true;
      staged->logs.push_back(
          absl::StrCat("trial '", trial, "' ended: every worker closed or is lost"));
    }
  }
  // Written whenever it changed, and with the first write of a trial not yet
  // durable (a failed first write leaves it new for the next group).
  if (trial_changed) put(TrialKey(trial), tm);
  return absl::OkStatus();
}

void Committer::StageDeletion(const PendingWrite& write, Staged* staged,
                              std::unique_ptr<TensorStore::Batch>* meta_batch) {
  const TrialUpdate& u = write.update;
  const std::string& trial = write.trial->name();
  if (*meta_batch == nullptr) *meta_batch = store_->NewBatch();
  TensorStore::Batch* b = meta_batch->get();
  // Every block written so far has a smaller id: the writes staged before
  // this one allocated theirs before, and a new trial of this name (made only
  // once this write is durable) gets larger ones.
  storage::DeletedTrial d;
  d.set_deleted_by(u.deleted_by);
  d.set_deleted_unix(u.deleted_unix);
  d.set_block_bound(next_block_id_ != nullptr ? next_block_id_->load()
                                              : std::numeric_limits<uint64_t>::max());
  b->Put(DeletedTrialKey(trial, d.block_bound()), d.SerializeAsString());
  b->Delete(TrialKey(trial));
  const WorkerId first{trial, ""};
  for (auto it = worker_meta_.lower_bound(first);
       it != worker_meta_.end() && it->first.first == trial; ++it) {
    b->Delete(WorkerKey(trial, it->first.second));
  }
  for (auto it = staged->workers.lower_bound(first);
       it != staged->workers.end() && it->first.first == trial;) {
    b->Delete(WorkerKey(trial, it->first.second));
    it = staged->workers.erase(it);
  }
  std::set<std::string> rules = std::move(staged->rules[trial]);
  for (const v1::RuleStatus& r : write.trial->RuleStatuses()) rules.insert(r.rule());
  for (const std::string& rule : rules) b->Delete(RuleKey(trial, rule));
  staged->rules.erase(trial);
  std::set<std::string> configured;
  for (const auto& [w, c] : write.trial->CollectionConfigsByWorker()) configured.insert(w);
  for (const auto& [w, c] : staged->collections[trial]) configured.insert(w);
  for (const std::string& w : configured) b->Delete(CollectionsKey(trial, w));
  staged->collections.erase(trial);
  staged->trials.erase(trial);
  staged->worker_counts.erase(trial);
  staged->deleted[trial] = {u.deleted_by, u.deleted_unix};
}

void Committer::Keep(Staged* staged) {
  for (auto& [name, meta] : staged->trials) trial_meta_[name] = std::move(meta);
  for (auto& [id, meta] : staged->workers) worker_meta_[id] = std::move(meta);
  for (const auto& [name, n] : staged->worker_counts) worker_counts_[name] = n;
  for (const auto& [name, by] : staged->deleted) {
    trial_meta_.erase(name);
    worker_counts_.erase(name);
    const WorkerId first{name, ""};
    auto it = worker_meta_.lower_bound(first);
    while (it != worker_meta_.end() && it->first.first == name) it = worker_meta_.erase(it);
  }
  for (const auto& [trial, at] : staged->ended) trial->NoteEnded(at);
}

void Committer::Run() {
  std::vector<PendingWrite> group;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Committer* c)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->stopping_ || !c->queue_.empty(); },
          this));
      if (queue_.empty() && stopping_) return;
      // Group up to ~64 MiB so that one write (and, with --sync, one fsync)
      // covers many.
      size_t bytes = 0;
      while (!queue_.empty() && (group.empty() || bytes < (64u << 20))) {
        if (queue_.front().batch != nullptr) bytes += queue_.front().batch->ApproximateSize();
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_bytes_ -= std::min(queued_bytes_, bytes);
    }
    std::vector<absl::Status> results(group.size());
    std::vector<std::unique_ptr<TensorStore::Batch>> meta(group.size());
    std::vector<char> noop(group.size(), 0);
    std::vector<TensorStore::Batch*> batches;
    Staged staged;
    bool any = false;
    for (size_t i = 0; i < group.size(); ++i) {
      PendingWrite& w = group[i];
      if (w.stream != nullptr && !w.stream->failed.ok()) {
        results[i] = w.stream->failed;
        continue;
      }
      bool nothing = false;
      results[i] = Stage(w, &staged, &meta[i], &nothing);
      noop[i] = nothing;
      if (!results[i].ok()) {
        spdlog::warn("trial '{}': refused a write of worker '{}': {}", w.trial->name(),
                     w.update.worker, std::string(results[i].message()));
        if (w.stream != nullptr) w.stream->failed = results[i];
        continue;
      }
      any = true;
      if (w.batch != nullptr) batches.push_back(w.batch.get());
      if (meta[i] != nullptr) batches.push_back(meta[i].get());
    }
    absl::Status written;
    // With --sync an accepted write is acknowledged only after an fsync, even
    // when it changed nothing on disk (a Flush after unsynced writes).
    if (!batches.empty() || (any && sync_)) written = store_->WriteAll(batches, sync_);
    if (written.ok()) {
      for (const std::string& line : staged.logs) spdlog::info("{}", line);
      Keep(&staged);
    } else {
      spdlog::error("commit of {} writes failed: {}", group.size(), written.ToString());
    }
    const auto durable = std::chrono::steady_clock::now();
    for (size_t i = 0; i < group.size(); ++i) {
      PendingWrite& w = group[i];
      if (results[i].ok() && !written.ok()) {
        results[i] = written;
        if (w.stream != nullptr) w.stream->failed = written;
      }
      if (results[i].ok() && !noop[i]) w.trial->Apply(w.update);
      if (results[i].ok()) {
        metrics_.writes.Add();
        if (w.batch != nullptr) metrics_.bytes.Add(w.batch->ApproximateSize());
        metrics_.records.Add(w.update.records.size());
        metrics_.latency.Observe(std::chrono::duration<double>(durable - w.submitted).count());
      } else {
        metrics_.failed.Add();
      }
      if (w.done) w.done(results[i]);
    }
    group.clear();
  }
}

}  // namespace tensorkeep
