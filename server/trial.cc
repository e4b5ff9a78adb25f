#include "server/trial.h"

#include <algorithm>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "re2/re2.h"
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

namespace {

// The memory all regexes of one tensor_names call may use: compiled programs
// plus the DFA caches matching fills (RE2 falls back to its slower, still
// linear NFA when the cache is full). RE2's default for one regex.
constexpr int64_t kRegexMemoryBytes = 8 << 20;

// What RE2's refusal of `pattern` means for someone who wrote it for
// Python's re.
std::string RegexHint(const RE2& re) {
  const std::string& arg = re.error_arg();
  if (re.error_code() == RE2::ErrorBadEscape && arg.size() >= 2 && arg[0] == '\\' &&
      arg[1] >= '1' && arg[1] <= '9') {
    return "backreferences are not supported (RE2 syntax)";
  }
  if (re.error_code() == RE2::ErrorBadPerlOp && re.pattern().find("(?P=") != std::string::npos) {
    return "backreferences are not supported (RE2 syntax)";
  }
  if (re.error_code() == RE2::ErrorBadPerlOp) {
    if (absl::StartsWith(arg, "(?=") || absl::StartsWith(arg, "(?!") ||
        absl::StartsWith(arg, "(?<")) {
      return "lookahead and lookbehind are not supported (RE2 syntax)";
    }
  }
  if (re.error_code() == RE2::ErrorPatternTooLarge) {
    return "the pattern is too large or complex; simplify it";
  }
  return "regexes use RE2 syntax: no backreferences or lookaround";
}

// The callers' regexes compiled with RE2 (linear-time matching, bounded
// memory, no recursion on the pattern's nesting), or BAD_REQUEST naming the
// first one RE2 refuses and why.
absl::StatusOr<std::vector<std::unique_ptr<RE2>>> CompileRegexes(
    const std::vector<std::string>& regexes) {
  TK_RETURN_IF_ERROR(ValidateRegexes(regexes));
  std::vector<std::unique_ptr<RE2>> out;
  if (regexes.empty()) return out;
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(kRegexMemoryBytes / static_cast<int64_t>(regexes.size()));
  for (const std::string& r : regexes) {
    auto re = std::make_unique<RE2>(r, options);
    if (!re->ok()) {
      return MakeError(Reason::kBadRequest,
                       absl::StrCat("invalid regex ", QuoteInput(r), ": ",
                                    QuoteInput(re->error(), 200), "; ", RegexHint(*re)));
    }
    out.push_back(std::move(re));
  }
  return out;
}

}  // namespace

Trial::Trial(std::string name, std::shared_ptr<Notifier> notifier)
    : name_(std::move(name)), notifier_(std::move(notifier)) {}

void Trial::Apply(const TrialUpdate& update) {
  {
    absl::MutexLock lock(&mu_);
    ApplyLocked(update);
  }
  version_.fetch_add(1);
  // A listener registered after this check reads the state applied above
  // when it starts (every reactor checks once after subscribing).
  if (listener_count_.load() == 0) return;
  if (notifier_ != nullptr) {
    if (auto self = weak_from_this().lock()) {
      notifier_->Signal(std::move(self));
      return;
    }
  }
  NotifyListeners();
}

void Trial::NotifyListeners() {
  std::vector<std::shared_ptr<const std::function<void()>>> live;
  {
    absl::MutexLock lock(&listeners_mu_);
    live.reserve(listeners_.size());
    for (const auto& [id, fn] : listeners_) live.push_back(fn);
  }
  for (const auto& fn : live) (*fn)();
}

std::shared_ptr<TrialSubscription> Trial::AddListener(std::function<void()> fn, bool watcher) {
  const uint64_t id = next_listener_id_++;
  listeners_.emplace(id, std::make_shared<const std::function<void()>>(std::move(fn)));
  listener_count_.store(listeners_.size());
  if (watcher) ++watchers_;
  return std::make_shared<TrialSubscription>(shared_from_this(), id, watcher);
}

void Trial::RemoveListener(uint64_t id, bool watcher) {
  absl::MutexLock lock(&listeners_mu_);
  if (listeners_.erase(id) == 0) return;
  listener_count_.store(listeners_.size());
  if (watcher) {
    --watchers_;
    if (notifier_ != nullptr) notifier_->ReleaseWatcher();
  }
}

TrialSubscription::~TrialSubscription() { trial_->RemoveListener(id_, watcher_); }

std::shared_ptr<TrialSubscription> Trial::Subscribe(std::function<void()> fn) {
  absl::MutexLock lock(&listeners_mu_);
  return AddListener(std::move(fn), /*watcher=*/false);
}

absl::StatusOr<std::shared_ptr<TrialSubscription>> Trial::Watch(std::function<void()> fn) {
  absl::MutexLock lock(&listeners_mu_);
  if (notifier_ != nullptr) {
    const NotifierOptions& limits = notifier_->options();
    if (watchers_ >= limits.max_trial_watchers) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "trial '", name_, "' has ", watchers_,
          " waiting or watching calls (WaitForSteps, WatchSteps, WatchRuleStatuses), its limit "
          "(MAX_TRIAL_WATCHERS): end some first, or share one watch between readers"));
    }
    if (!notifier_->TryAcquireWatcher()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the collector has ", limits.max_watchers,
          " waiting or watching calls (WaitForSteps, WatchSteps, WatchRuleStatuses), its limit "
          "(MAX_WATCHERS): retry later, or end some first"));
    }
  }
  return AddListener(std::move(fn), /*watcher=*/true);
}

size_t Trial::listeners() const {
  absl::MutexLock lock(&listeners_mu_);
  return listeners_.size();
}

size_t Trial::watchers() const {
  absl::MutexLock lock(&listeners_mu_);
  return watchers_;
}

void Trial::ApplyQuietly(const TrialUpdate& update) {
  absl::MutexLock lock(&mu_);
  ApplyLocked(update);
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
  if (update.num_workers > 0) tracker_.DeclareWorkers(update.num_workers);
  int wid = -1;
  if (!update.worker.empty()) wid = WorkerIdLocked(update.worker);
  // Records come grouped by step: index a step once per run of records.
  const IndexedRecord* previous = nullptr;
  for (const IndexedRecord& r : update.records) {
    if (previous == nullptr || previous->step != r.step || previous->mode != r.mode ||
        previous->mode_step != r.mode_step) {
      if (steps_.insert_or_assign(r.step, StepInfo{r.mode, r.mode_step}).second) {
        // Steps arrive in increasing order but for the odd late one.
        if (step_list_.empty() || step_list_.back() < r.step) {
          step_list_.push_back(r.step);
        } else {
          step_list_.insert(std::lower_bound(step_list_.begin(), step_list_.end(), r.step), r.step);
        }
      }
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
    WorkerSet& ws = found->second->steps[r.step];
    const uint16_t w = static_cast<uint16_t>(wid);
    // Keep workers sorted by name so that "the first worker" is lexical.
    auto pos = std::lower_bound(ws.begin(), ws.end(), w, [this](uint16_t a, uint16_t b) {
      return worker_names_[a] < worker_names_[b];
    });
    if (pos == ws.end() || *pos != w) ws.insert(pos, w);
    for (const std::string& c : r.collections) collections_[c].insert(r.name);
  }
  for (const BlockRef& b : update.blocks) {
    blocks_[b.step].push_back(
        StoredBlock{static_cast<uint16_t>(wid), b.id, b.first_name, b.last_name});
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

std::vector<uint64_t> Trial::BlocksFor(uint64_t step, const std::string& worker,
                                       const std::string& tensor) const {
  std::vector<uint64_t> ids;
  absl::ReaderMutexLock lock(&mu_);
  const int wid = FindWorkerLocked(worker);
  auto it = blocks_.find(step);
  if (wid < 0 || it == blocks_.end()) return ids;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) {
    if (b->worker == wid && b->first_name <= tensor && tensor <= b->last_name) ids.push_back(b->id);
  }
  std::sort(ids.begin(), ids.end(), std::greater<uint64_t>());
  return ids;
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
  std::set<int> modes;
  for (const auto& [step, info] : steps_) modes.insert(info.mode);
  for (int m : modes) s.add_modes(static_cast<v1::Mode>(m));
  return s;
}

bool Trial::VisibleLocked(uint64_t global, bool show_incomplete) const {
  if (tracker_.IsComplete(global)) return true;
  return show_incomplete && tracker_.any_committed_through() != StepTracker::kNone &&
         static_cast<int64_t>(global) <= tracker_.any_committed_through();
}

absl::StatusOr<const Trial::TensorEntry*> Trial::FindTensorLocked(const std::string& tensor) const {
  auto it = tensors_.find(tensor);
  if (it == tensors_.end()) {
    return MakeError(Reason::kTensorUnavailable,
                     absl::StrCat("tensor '", tensor, "' was not saved in trial '", name_, "'"));
  }
  return &it->second;
}

absl::StatusOr<std::vector<uint64_t>> Trial::Steps(int mode, bool show_incomplete,
                                                   const std::string& tensor, uint64_t range_begin,
                                                   uint64_t range_end) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<uint64_t> out;
  auto in_range = [&](uint64_t g) { return g >= range_begin && (range_end == 0 || g < range_end); };
  auto emit = [&](uint64_t g, const StepInfo& info) {
    if (!in_range(g) || !VisibleLocked(g, show_incomplete)) return;
    if (IsGlobalMode(mode)) {
      out.push_back(g);
    } else if (info.mode == mode) {
      out.push_back(info.mode_step);
    }
  };
  if (tensor.empty() && IsGlobalMode(mode)) {
    // Visibility is a prefix of the steps: the visible global steps in range
    // are one slice of the sorted list.
    int64_t visible_through = tracker_.complete_through();
    if (show_incomplete)
      visible_through = std::max(visible_through, tracker_.any_committed_through());
    if (visible_through < 0) return out;
    uint64_t end_step = static_cast<uint64_t>(visible_through);  // inclusive
    if (range_end != 0) end_step = std::min(end_step, range_end - 1);
    if (range_end != 0 && range_end <= range_begin) return out;
    auto first = std::lower_bound(step_list_.begin(), step_list_.end(), range_begin);
    auto last = std::upper_bound(first, step_list_.end(), end_step);
    out.assign(first, last);
    return out;
  }
  if (tensor.empty()) {
    // One mode's steps. Visibility is a prefix of the steps: stop at the first
    // invisible one.
    for (auto it = steps_.lower_bound(range_begin); it != steps_.end(); ++it) {
      const uint64_t g = it->first;
      if ((range_end != 0 && g >= range_end) || !VisibleLocked(g, show_incomplete)) break;
      if (it->second.mode == mode) out.push_back(it->second.mode_step);
    }
    return out;
  }
  auto entry = FindTensorLocked(tensor);
  if (!entry.ok()) return entry.status();
  // Both maps are in step order: walk them together instead of a lookup per
  // step.
  auto si = steps_.begin();
  for (const auto& [g, workers] : (*entry)->steps) {
    while (si != steps_.end() && si->first < g) ++si;
    if (si == steps_.end()) break;
    if (si->first == g) emit(g, si->second);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Trial::TensorNames(std::optional<uint64_t> step, int mode,
                                                            const std::vector<std::string>& regex,
                                                            const std::string& collection) const {
  if (!regex.empty() && !collection.empty()) {
    return MakeError(Reason::kBadRequest,
                     "tensor_names accepts either regex or collection, not both");
  }
  TK_ASSIGN_OR_RETURN(const std::vector<std::unique_ptr<RE2>> patterns, CompileRegexes(regex));
  // Under the lock, only the names that pass the step, mode and collection
  // filters; the regexes run after it is released, so a slow match never
  // holds up the committer (Apply needs the lock exclusively). The pointers
  // stay valid: entries of tensors_ are never erased and their keys never
  // change.
  std::vector<const std::string*> candidates;
  {
    absl::ReaderMutexLock lock(&mu_);
    std::optional<uint64_t> global;
    if (step.has_value()) {
      global = ToGlobalLocked(*step, mode);
      if (!global.has_value()) return std::vector<std::string>();
    }
    const std::set<std::string>* members = nullptr;
    if (!collection.empty()) {
      auto it = collections_.find(collection);
      if (it == collections_.end()) return std::vector<std::string>();
      members = &it->second;
    }
    for (const auto& [name, entry] : tensors_) {
      if (members != nullptr && members->count(name) == 0) continue;
      if (global.has_value()) {
        if (entry.steps.count(*global) == 0) continue;
      } else if (!IsGlobalMode(mode)) {
        bool in_mode = false;
        for (const auto& [g, ws] : entry.steps) {
          auto si = steps_.find(g);
          if (si != steps_.end() && si->second.mode == mode) {
            in_mode = true;
            break;
          }
        }
        if (!in_mode) continue;
      }
      candidates.push_back(&name);
    }
  }
  std::vector<std::string> out;
  for (const std::string* name : candidates) {
    if (!patterns.empty()) {
      // smdebug matches with re.search (match_inc): anywhere in the name.
      const bool any = std::any_of(patterns.begin(), patterns.end(),
                                   [&](const auto& p) { return RE2::PartialMatch(*name, *p); });
      if (!any) continue;
    }
    out.push_back(*name);
  }
  return out;
}

std::vector<std::string> Trial::Workers() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> out = worker_names_;
  std::sort(out.begin(), out.end());
  return out;
}

v1::WorkerStatus Trial::StatusLocked(int id) const {
  v1::WorkerStatus s;
  s.set_worker(worker_names_[id]);
  const WorkerInfo& info = worker_info_[id];
  s.set_last_step(info.last_step);
  s.set_committed_through(info.committed);
  switch (tracker_.state(id)) {
    case WorkerState::kActive:
      s.set_state(v1::ACTIVE);
      break;
    case WorkerState::kClosed:
      s.set_state(v1::CLOSED);
      break;
    case WorkerState::kLost:
      s.set_state(v1::LOST);
      s.set_reason(info.lost_reason);
      s.set_since_unix(info.lost_unix);
      break;
  }
  return s;
}

std::vector<v1::WorkerStatus> Trial::WorkerStatuses() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<v1::WorkerStatus> out;
  out.reserve(worker_names_.size());
  for (size_t id = 0; id < worker_names_.size(); ++id) out.push_back(StatusLocked(id));
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.worker() < b.worker(); });
  return out;
}

std::optional<WorkerState> Trial::StateOf(const std::string& worker) const {
  absl::ReaderMutexLock lock(&mu_);
  const int id = FindWorkerLocked(worker);
  if (id < 0) return std::nullopt;
  return tracker_.state(id);
}

void Trial::DescribeStep(uint64_t step, v1::StepEvent* event) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<const std::string*> names;
  if (auto it = blocks_.find(step); it != blocks_.end()) {
    for (const StoredBlock& b : it->second) names.push_back(&worker_names_[b.worker]);
  }
  std::sort(names.begin(), names.end(), [](auto* a, auto* b) { return *a < *b; });
  names.erase(std::unique(names.begin(), names.end(), [](auto* a, auto* b) { return *a == *b; }),
              names.end());
  for (const std::string* n : names) event->add_workers(*n);
  std::vector<std::string> lost;
  for (size_t id = 0; id < worker_names_.size(); ++id) {
    if (tracker_.state(id) == WorkerState::kLost) lost.push_back(worker_names_[id]);
  }
  std::sort(lost.begin(), lost.end());
  for (auto& n : lost) event->add_lost_workers(std::move(n));
}

std::vector<int> Trial::Modes() const {
  absl::ReaderMutexLock lock(&mu_);
  std::set<int> modes;
  for (const auto& [step, info] : steps_) modes.insert(info.mode);
  return std::vector<int>(modes.begin(), modes.end());
}

std::map<std::string, std::vector<std::string>> Trial::Collections() const {
  absl::ReaderMutexLock lock(&mu_);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [c, names] : collections_) {
    out[c] = std::vector<std::string>(names.begin(), names.end());
  }
  return out;
}

std::optional<uint64_t> Trial::ToGlobalLocked(uint64_t step, int mode) const {
  if (IsGlobalMode(mode)) {
    if (steps_.count(step) == 0) return std::nullopt;
    return step;
  }
  auto m = mode_steps_.find(mode);
  if (m == mode_steps_.end()) return std::nullopt;
  auto it = m->second.find(step);
  if (it == m->second.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<StepInfo> Trial::ModeOf(uint64_t global_step) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = steps_.find(global_step);
  if (it == steps_.end()) {
    const StepState st = HasPassedStepLocked(global_step, kModeGlobal);
    return MakeError(
        st == StepState::kNotYetAvailable ? Reason::kStepNotYetAvailable : Reason::kStepUnavailable,
        absl::StrCat("global step ", global_step, " was not saved in trial '", name_, "'"));
  }
  return it->second;
}

absl::StatusOr<uint64_t> Trial::GlobalStep(int mode, uint64_t mode_step) const {
  absl::ReaderMutexLock lock(&mu_);
  auto g = ToGlobalLocked(mode_step, mode);
  if (!g.has_value()) {
    const StepState st = HasPassedStepLocked(mode_step, mode);
    return MakeError(
        st == StepState::kNotYetAvailable ? Reason::kStepNotYetAvailable : Reason::kStepUnavailable,
        absl::StrCat(StepText(mode_step, mode), " was not saved in trial '", name_, "'"));
  }
  return *g;
}

StepState Trial::HasPassedStep(uint64_t step, int mode) const {
  absl::ReaderMutexLock lock(&mu_);
  return HasPassedStepLocked(step, mode);
}

StepState Trial::HasPassedStepLocked(uint64_t step, int mode) const {
  auto g = ToGlobalLocked(step, mode);
  if (g.has_value()) {
    return tracker_.IsComplete(*g) ? StepState::kAvailable : StepState::kNotYetAvailable;
  }
  if (tracker_.ended()) return StepState::kUnavailable;
  if (IsGlobalMode(mode)) {
    // Absent, and every worker has moved past it: it will never be saved.
    return tracker_.IsComplete(step) ? StepState::kUnavailable : StepState::kNotYetAvailable;
  }
  // Absent in its mode: unavailable once a later step of the mode is complete.
  auto m = mode_steps_.find(mode);
  if (m != mode_steps_.end()) {
    for (auto it = m->second.upper_bound(step); it != m->second.end(); ++it) {
      if (tracker_.IsComplete(it->second)) return StepState::kUnavailable;
    }
  }
  return StepState::kNotYetAvailable;
}

absl::Status Trial::StepErrorLocked(const std::string& tensor, uint64_t step, int mode) const {
  switch (HasPassedStepLocked(step, mode)) {
    case StepState::kAvailable:
      return MakeError(Reason::kTensorUnavailableForStep,
                       absl::StrCat("tensor '", tensor, "' is not available for ",
                                    StepText(step, mode), " in trial '", name_, "'"));
    case StepState::kUnavailable:
      return MakeError(Reason::kStepUnavailable,
                       absl::StrCat(StepText(step, mode), " was not saved in trial '", name_, "'"));
    case StepState::kNotYetAvailable:
      if (tracker_.ended()) {
        return MakeError(Reason::kNoMoreData,
                         absl::StrCat("trial '", name_, "' ended before ", StepText(step, mode)));
      }
      return MakeError(
          Reason::kStepNotYetAvailable,
          absl::StrCat(StepText(step, mode), " is not yet available in trial '", name_, "'"));
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<Trial::Located> Trial::Locate(const std::string& tensor, uint64_t step, int mode,
                                             const std::string& worker) const {
  absl::ReaderMutexLock lock(&mu_);
  auto entry_or = FindTensorLocked(tensor);
  if (!entry_or.ok()) return entry_or.status();
  const TensorEntry& entry = **entry_or;
  int wid = -1;
  if (!worker.empty()) {
    wid = FindWorkerLocked(worker);
    if (wid < 0) {
      return MakeError(Reason::kInvalidWorker,
                       absl::StrCat("worker '", worker, "' never wrote to trial '", name_,
                                    "'; its workers are listed by `workers`"));
    }
  }
  auto g = ToGlobalLocked(step, mode);
  if (!g.has_value()) return StepErrorLocked(tensor, step, mode);
  auto it = entry.steps.find(*g);
  if (it == entry.steps.end()) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("tensor '", tensor, "' is not available for ",
                                  StepText(step, mode), " in trial '", name_, "'"));
  }
  const WorkerSet& ws = it->second;
  uint16_t chosen = ws.front();
  if (wid >= 0) {
    if (std::find(ws.begin(), ws.end(), static_cast<uint16_t>(wid)) == ws.end()) {
      return MakeError(
          Reason::kTensorUnavailableForStep,
          absl::StrCat("tensor '", tensor, "' is not available for ", StepText(step, mode),
                       " from worker '", worker, "' in trial '", name_, "'"));
    }
    chosen = static_cast<uint16_t>(wid);
  }
  return Located{*g, steps_.at(*g), worker_names_[chosen]};
}

absl::StatusOr<std::vector<Trial::Located>> Trial::LocateAll(const std::string& tensor, int mode,
                                                             const std::string& worker,
                                                             uint64_t range_begin,
                                                             uint64_t range_end) const {
  absl::ReaderMutexLock lock(&mu_);
  auto entry_or = FindTensorLocked(tensor);
  if (!entry_or.ok()) return entry_or.status();
  int wid = -1;
  if (!worker.empty()) {
    wid = FindWorkerLocked(worker);
    if (wid < 0) {
      return MakeError(Reason::kInvalidWorker,
                       absl::StrCat("worker '", worker, "' never wrote to trial '", name_, "'"));
    }
  }
  std::vector<Located> out;
  for (auto it = (*entry_or)->steps.lower_bound(range_begin); it != (*entry_or)->steps.end();
       ++it) {
    const uint64_t g = it->first;
    if (range_end != 0 && g >= range_end) break;
    if (!tracker_.IsComplete(g)) break;
    const StepInfo& info = steps_.at(g);
    if (!IsGlobalMode(mode) && info.mode != mode) continue;
    uint16_t chosen = it->second.front();
    if (wid >= 0) {
      if (std::find(it->second.begin(), it->second.end(), static_cast<uint16_t>(wid)) ==
          it->second.end()) {
        continue;
      }
      chosen = static_cast<uint16_t>(wid);
    }
    out.push_back(Located{g, info, worker_names_[chosen]});
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Trial::TensorWorkers(const std::string& tensor,
                                                              uint64_t step, int mode) const {
  absl::ReaderMutexLock lock(&mu_);
  auto entry_or = FindTensorLocked(tensor);
  if (!entry_or.ok()) return entry_or.status();
  auto g = ToGlobalLocked(step, mode);
  if (!g.has_value()) return StepErrorLocked(tensor, step, mode);
  auto it = (*entry_or)->steps.find(*g);
  if (it == (*entry_or)->steps.end()) {
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("tensor '", tensor, "' is not available for ",
                                  StepText(step, mode), " in trial '", name_, "'"));
  }
  std::vector<std::string> out;
  for (uint16_t w : it->second) out.push_back(worker_names_[w]);
  return out;
}

absl::StatusOr<std::vector<uint64_t>> Trial::PrevSteps(const std::string& tensor, uint64_t step,
                                                       uint32_t n, int mode) const {
  auto steps = Steps(mode, /*show_incomplete=*/false, tensor, 0, 0);
  if (!steps.ok()) return steps.status();
  auto end = std::upper_bound(steps->begin(), steps->end(), step);
  auto begin = end - std::min<ptrdiff_t>(n, end - steps->begin());
  return std::vector<uint64_t>(begin, end);
}

std::vector<std::pair<uint64_t, StepInfo>> Trial::CompleteStepsFrom(uint64_t from,
                                                                    size_t limit) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, StepInfo>> out;
  for (auto it = steps_.lower_bound(from); it != steps_.end() && out.size() < limit; ++it) {
    if (!tracker_.IsComplete(it->first)) break;
    out.emplace_back(it->first, it->second);
  }
  return out;
}

int64_t Trial::LastStep() const {
  absl::ReaderMutexLock lock(&mu_);
  return steps_.empty() ? -1 : static_cast<int64_t>(steps_.rbegin()->first);
}

std::optional<uint64_t> Trial::LastStep(int mode) const {
  absl::ReaderMutexLock lock(&mu_);
  if (IsGlobalMode(mode)) {
    if (steps_.empty()) return std::nullopt;
    return steps_.rbegin()->first;
  }
  auto m = mode_steps_.find(mode);
  if (m == mode_steps_.end() || m->second.empty()) return std::nullopt;
  return m->second.rbegin()->first;
}

std::vector<v1::RuleStatus> Trial::RuleStatuses() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<v1::RuleStatus> out;
  for (const auto& [name, rs] : rules_) out.push_back(rs);
  return out;
}

std::vector<std::pair<uint64_t, v1::RuleStatus>> Trial::RuleStatusesAfter(uint64_t after,
                                                                          size_t limit) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, v1::RuleStatus>> out;
  for (auto it = rule_changes_.upper_bound(after); it != rule_changes_.end() && out.size() < limit;
       ++it) {
    out.emplace_back(it->first, rules_.at(it->second));
  }
  return out;
}

}  // namespace tensorkeep
