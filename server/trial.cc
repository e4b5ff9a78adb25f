#include "server/trial.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/validation.h"

namespace tensorkeep {

std::string ModeName(int mode) {
  switch (mode) {
    case 1:
      return "TRAIN";
    case 2:
      return "EVAL";
    case 3:
      return "PREDICT";
    default:
      return "GLOBAL";
  }
}

std::string StepText(uint64_t step, int mode) {
  return IsGlobalMode(mode) ? absl::StrCat("step ", step)
                            : absl::StrCat(ModeName(mode), " step ", step);
}

Trial::Trial(std::string name, std::shared_ptr<Notifier> notifier)
    : name_(std::move(name)), notifier_(std::move(notifier)) {}

void Trial::Apply(const TrialUpdate& update) {
  ApplyQuietly(update);
  version_.fetch_add(1);
  // A listener registered after this check reads the state applied above
  // when it starts (every reactor checks once after subscribing).
  // (The notifier's WatchTrials listeners hear of every trial's changes.)
  if (listener_count_.load() == 0 && (notifier_ == nullptr || !notifier_->trials_watched())) {
    return;
  }
  if (notifier_ != nullptr) {
    if (auto self = weak_from_this().lock()) {
      notifier_->Signal(std::move(self));
      return;
    }
  }
  NotifyListeners();
}

void Trial::ApplyQuietly(const TrialUpdate& update) {
  // Counted while it waits: walks let it in between their slices.
  writers_waiting_.fetch_add(1);
  absl::MutexLock lock(&mu_);
  writers_waiting_.fetch_sub(1);
  ApplyLocked(update);
}

void Trial::LetWritersIn() const {
  if (writers_waiting_.load(std::memory_order_relaxed) == 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  while (writers_waiting_.load(std::memory_order_relaxed) > 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
}

int Trial::WorkerIdLocked(const std::string& worker) {
  auto it = worker_ids_.find(worker);
  if (it != worker_ids_.end()) return it->second;
  const int id = static_cast<int>(worker_names_.size());
  worker_names_.push_back(worker);
  worker_ids_.emplace(worker, id);
  worker_info_.emplace_back();
  tracker_.Commit(id, StepTracker::kNone);
  return id;
}

int Trial::FindWorkerLocked(const std::string& worker) const {
  auto it = worker_ids_.find(worker);
  return it == worker_ids_.end() ? -1 : it->second;
}

void Trial::ApplyLocked(const TrialUpdate& update) {
  if (update.delete_trial) {
    deleted_ = true;
    deleted_by_ = update.deleted_by;
    deleted_unix_ = update.deleted_unix;
    return;
  }
  if (update.num_workers > 0) tracker_.DeclareWorkers(update.num_workers);
  int wid = -1;
  bool known_worker = false;
  if (!update.worker.empty()) {
    known_worker = FindWorkerLocked(update.worker) >= 0;
    wid = WorkerIdLocked(update.worker);
  }
  if (wid >= 0 && update.recovered_attempt) {
    worker_info_[wid].attempt = update.attempt;
    worker_info_[wid].restarts = update.restarts;
  } else if (wid >= 0 && update.change == WorkerChange::kOpened &&
             update.attempt > worker_info_[wid].attempt) {
    WorkerInfo& info = worker_info_[wid];
    if (known_worker) {  // a restart (a new worker just starts at its attempt)
      v1::WorkerRestart r;
      r.set_attempt(update.attempt);
      r.set_started_unix(update.restart_unix);
      r.set_previous_committed_through(tracker_.committed(wid) == StepTracker::kAll
                                           ? info.committed
                                           : tracker_.committed(wid));
      info.restarts.push_back(std::move(r));
      if (info.restarts.size() > kMaxRecordedRestarts) info.restarts.erase(info.restarts.begin());
      tracker_.Restart(wid);
      info.committed = StepTracker::kNone;
      info.lost_reason.clear();
      info.lost_unix = 0;
    }
    info.attempt = update.attempt;
  }
  if (wid >= 0 && !update.records.empty() && !worker_info_[wid].restarts.empty() &&
      static_cast<int64_t>(update.records.front().step) <=
          worker_info_[wid].restarts.back().previous_committed_through()) {
    rewrites_.fetch_add(1);  // (records come sorted by step)
  }
  // Records come grouped by step: index a step once per run of records.
  const IndexedRecord* previous = nullptr;
  for (const IndexedRecord& r : update.records) {
    if (previous == nullptr || previous->step != r.step || previous->mode != r.mode ||
        previous->mode_step != r.mode_step) {
      if (steps_.insert_or_assign(r.step, StepInfo{r.mode, r.mode_step}).second) {
        step_list_.Insert(r.step);
      }
      if (r.mode >= 0 && r.mode < 8) step_modes_ |= static_cast<uint8_t>(1u << r.mode);
      if (!IsGlobalMode(r.mode)) mode_steps_[r.mode][r.mode_step] = r.step;
    }
    previous = &r;
    if (wid >= 0) {
      int64_t& last = worker_info_[wid].last_step;
      last = std::max(last, static_cast<int64_t>(r.step));
    }
    auto found = tensor_lookup_.find(r.name);
    if (found == tensor_lookup_.end()) {
      found = tensor_lookup_.emplace(r.name, &tensors_[r.name]).first;
    }
    if (r.mode >= 0 && r.mode < 8) found->second->modes |= static_cast<uint8_t>(1u << r.mode);
    WorkerSet& ws = found->second->steps[r.step];
    const uint16_t w = static_cast<uint16_t>(wid);
    // Keep workers sorted by name so that "the first worker" is lexical.
    const absl::Span<const uint16_t> ids = ws.ids(worker_sets_);
    auto pos = std::lower_bound(ids.begin(), ids.end(), w, [this](uint16_t a, uint16_t b) {
      return worker_names_[a] < worker_names_[b];
    });
    if (pos == ids.end() || *pos != w) {
      ws.Insert(static_cast<size_t>(pos - ids.begin()), w, &worker_sets_);
    }
    for (const std::string& c : r.collections) collections_[c].insert(r.name);
  }
  for (const BlockRef& b : update.blocks) {
    blocks_[b.step].push_back(StoredBlock{b.id, &NameLocked(b.first_name),
                                          &NameLocked(b.last_name), static_cast<uint16_t>(wid)});
  }
  if (wid >= 0 && update.committed_through != StepTracker::kNone) {
    tracker_.Commit(wid, update.committed_through);
    int64_t& committed = worker_info_[wid].committed;
    committed = std::max(committed, update.committed_through);
  }
  if (wid >= 0 && update.finished) tracker_.Finish(wid);
  const bool lost =
      update.change == WorkerChange::kTimedOut || update.change == WorkerChange::kDeclaredLost;
  if (wid >= 0 && lost && tracker_.state(wid) == WorkerState::kActive) {
    tracker_.Lose(wid);
    worker_info_[wid].lost_reason = update.lost_reason;
    worker_info_[wid].lost_unix = update.lost_unix;
  }
  if (wid >= 0 && update.change == WorkerChange::kOpened &&
      tracker_.state(wid) == WorkerState::kLost) {
    tracker_.Reactivate(wid);
    worker_info_[wid].lost_reason.clear();
    worker_info_[wid].lost_unix = 0;
  }
  if (update.end_trial) tracker_.End();
  if (update.collections != nullptr) {
    collection_configs_[update.collections_worker] = update.collections;
  }
  if (update.complete_floor != StepTracker::kNone) tracker_.RaiseFloor(update.complete_floor);
  if (update.rule_status.has_value()) {
    const v1::RuleStatus& rs = *update.rule_status;
    rules_[rs.rule()] = rs;
    auto [it, fresh] = rule_change_of_.emplace(rs.rule(), 0);
    if (!fresh) rule_changes_.erase(it->second);
    it->second = ++rule_change_count_;
    rule_changes_.emplace(it->second, rs.rule());
    if (rs.action() == "stop" && rs.state() == v1::RuleStatus::ISSUES_FOUND && !stop_requested_) {
      stop_requested_ = true;
      stop_reason_ = absl::StrCat("rule ", rs.rule(), " found an issue at step ", rs.step(),
                                  rs.message().empty() ? "" : ": ", rs.message());
    }
  }
}

const std::string& Trial::NameLocked(const std::string& name) {
  if (auto it = tensors_.find(name); it != tensors_.end()) return it->first;
  return *other_block_names_.insert(name).first;
}

std::vector<uint64_t> Trial::BlocksFor(uint64_t step, const std::string& worker,
                                       const std::string& tensor) const {
  std::vector<uint64_t> ids;
  absl::ReaderMutexLock lock(&mu_);
  const int wid = FindWorkerLocked(worker);
  auto it = blocks_.find(step);
  if (wid < 0 || it == blocks_.end()) return ids;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) {
    if (b->worker == wid && *b->first_name <= tensor && tensor <= *b->last_name) {
      ids.push_back(b->id);
    }
  }
  std::sort(ids.begin(), ids.end(), std::greater<uint64_t>());
  return ids;
}

std::optional<uint32_t> Trial::AttemptOf(const std::string& worker) const {
  absl::ReaderMutexLock lock(&mu_);
  const int id = FindWorkerLocked(worker);
  if (id < 0) return std::nullopt;
  return worker_info_[id].attempt;
}

int64_t Trial::CommittedThrough(const std::string& worker) const {
  absl::ReaderMutexLock lock(&mu_);
  const int id = FindWorkerLocked(worker);
  return id < 0 ? StepTracker::kNone : tracker_.committed(id);
}

std::optional<StepInfo> Trial::GetStep(uint64_t step) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = steps_.find(step);
  if (it == steps_.end()) return std::nullopt;
  return it->second;
}

size_t Trial::CountNewNames(const std::vector<IndexedRecord>& records, size_t* held) const {
  absl::ReaderMutexLock lock(&mu_);
  *held = tensors_.size();
  std::vector<const std::string*> fresh;
  for (const IndexedRecord& r : records) {
    if (tensor_lookup_.find(r.name) == tensor_lookup_.end()) fresh.push_back(&r.name);
  }
  if (fresh.size() <= 1) return fresh.size();
  std::sort(fresh.begin(), fresh.end(), [](auto* a, auto* b) { return *a < *b; });
  return std::unique(fresh.begin(), fresh.end(), [](auto* a, auto* b) { return *a == *b; }) -
         fresh.begin();
}

std::optional<uint64_t> Trial::FindGlobalStep(int mode, uint64_t mode_step) const {
  absl::ReaderMutexLock lock(&mu_);
  return ToGlobalLocked(mode_step, mode);
}

int64_t Trial::CompleteThrough() const {
  absl::ReaderMutexLock lock(&mu_);
  return tracker_.complete_through();
}

bool Trial::ended() const {
  absl::ReaderMutexLock lock(&mu_);
  return tracker_.ended();
}

double Trial::ended_unix() const {
  absl::ReaderMutexLock lock(&mu_);
  return ended_unix_;
}

void Trial::NoteEnded(double unix) {
  absl::MutexLock lock(&mu_);
  if (ended_unix_ == 0) ended_unix_ = unix;
}

bool Trial::deleted(std::string* by, double* at) const {
  absl::ReaderMutexLock lock(&mu_);
  if (by != nullptr) *by = deleted_by_;
  if (at != nullptr) *at = deleted_unix_;
  return deleted_;
}

absl::Status Trial::NotFoundError() const {
  std::string by;
  double at = 0;
  if (!deleted(&by, &at)) {
    return MakeError(Reason::kTrialNotFound,
                     absl::StrCat("trial '", name_, "' not found on this collector"));
  }
  return MakeError(Reason::kTrialNotFound,
                   absl::StrCat("trial '", name_, "' not found on this collector (deleted by ", by,
                                " at ", UnixTimeText(at), ")"));
}

absl::Status Trial::DeletedError() const {
  std::string by;
  double at = 0;
  deleted(&by, &at);
  return TrialDeletedError(name_, by, at);
}

absl::Status TrialDeletedError(const std::string& trial, const std::string& by, double unix) {
  return absl::FailedPreconditionError(
      absl::StrCat("trial '", trial, "' was deleted by ", by, " at ", UnixTimeText(unix),
                   ": nothing more is stored for it (a new trial of that name starts empty when "
                   "a writer opens it again)"));
}

std::string UnixTimeText(double unix) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(static_cast<int64_t>(unix)),
                          absl::UTCTimeZone());
}

bool Trial::stop_requested(std::string* reason) const {
  absl::ReaderMutexLock lock(&mu_);
  if (reason != nullptr) *reason = stop_reason_;
  return stop_requested_;
}

size_t Trial::StepCount() const {
  absl::ReaderMutexLock lock(&mu_);
  return steps_.size();
}

uint32_t Trial::num_workers() const {
  absl::ReaderMutexLock lock(&mu_);
  return tracker_.expected_workers();
}

v1::TrialSummary Trial::Summary() const {
  absl::ReaderMutexLock lock(&mu_);
  v1::TrialSummary s;
  s.set_name(name_);
  s.set_ended(tracker_.ended());
  s.set_num_workers(tracker_.expected_workers());
  s.set_num_steps(steps_.size());
  s.set_last_step(steps_.empty() ? -1 : static_cast<int64_t>(steps_.rbegin()->first));
  s.set_complete_through(tracker_.ended() ? s.last_step() : tracker_.complete_through());
  s.set_num_tensors(tensors_.size());
  s.set_stop_requested(stop_requested_);
  s.set_stop_reason(stop_reason_);
  std::vector<int> ids(worker_names_.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  std::sort(ids.begin(), ids.end(), [this](int a, int b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return worker_names_[a] < worker_names_[b];
  });
  for (int id : ids) {
    s.add_workers(worker_names_[id]);
    *s.add_worker_statuses() = StatusLocked(id);
  }
  for (int m = 0; m < 8; ++m) {
    if ((step_modes_ >> m & 1) != 0) s.add_modes(static_cast<v1::Mode>(m));
  }
  return s;
}

}  // namespace tensorkeep
