// Trial's queries: steps, tensor names, workers and their states, modes,
// collections, locating a tensor's records, rule statuses.
#include <algorithm>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "re2/re2.h"
#include "server/tensor_name_regex.h"
#include "server/trial.h"
#include "server/validation.h"

namespace tensorkeep {

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

namespace {

// Grows `out` (outside the lock) so that a slice of a walk adds to it without
// reallocating it under the lock: copying 1,000,000 results held it ~20 ms.
template <typename T>
void RoomForASlice(std::vector<T>* out, size_t slice = Trial::kStepsPerLockHold) {
  if (out->capacity() - out->size() >= slice) return;
  out->reserve(std::max(2 * out->capacity(), out->size() + std::max(slice, size_t{1024})));
}

// A slice of the global steps' copy (a memcpy of 512 KiB).
constexpr size_t kGlobalStepsPerLockHold = 8 * Trial::kStepsPerLockHold;

}  // namespace

absl::StatusOr<std::vector<uint64_t>> Trial::Steps(int mode, bool show_incomplete,
                                                   const std::string& tensor, uint64_t range_begin,
                                                   uint64_t range_end) const {
  std::vector<uint64_t> out;
  if (range_end != 0 && range_end <= range_begin) return out;
  // The walks below take the lock for kStepsPerLockHold steps at a time (a
  // copy of the global steps for a few times as many: it is a memcpy).
  uint64_t from = range_begin;
  if (tensor.empty() && IsGlobalMode(mode)) {
    // Visibility is a prefix of the steps: the visible global steps in range
    // are one run of the sorted list, as they were when the walk began.
    uint64_t end_step;  // inclusive
    size_t estimate;
    {
      absl::ReaderMutexLock lock(&mu_);
      int64_t visible_through = tracker_.complete_through();
      if (show_incomplete)
        visible_through = std::max(visible_through, tracker_.any_committed_through());
      if (visible_through < 0) return out;
      end_step = static_cast<uint64_t>(visible_through);
      if (range_end != 0) end_step = std::min(end_step, range_end - 1);
      if (end_step < from) return out;
      estimate = step_list_.EstimateRange(from, end_step);
    }
    // Room for them all, allocated outside the lock (growing the answer
    // slice by slice, by doubling, made the copy four times as long).
    out.reserve(estimate);
    for (;;) {
      // Room for a slice, or for what the estimate says is left (more room
      // only when it was short: late steps).
      RoomForASlice(
          &out, std::min(kGlobalStepsPerLockHold,
                         estimate > out.size() ? estimate - out.size() : kGlobalStepsPerLockHold));
      LetWritersIn();
      absl::ReaderMutexLock lock(&mu_);
      const size_t n = step_list_.AppendRange(from, end_step, &out, kGlobalStepsPerLockHold);
      if (n < kGlobalStepsPerLockHold || out.back() == end_step) return out;
      from = out.back() + 1;
    }
  }
  if (tensor.empty()) {
    // One mode's steps. Visibility is a prefix of the steps: stop at the first
    // invisible one.
    for (;;) {
      RoomForASlice(&out);
      LetWritersIn();
      absl::ReaderMutexLock lock(&mu_);
      auto it = steps_.lower_bound(from);
      for (size_t n = 0; n < kStepsPerLockHold; ++n, ++it) {
        if (it == steps_.end()) return out;
        const uint64_t g = it->first;
        if ((range_end != 0 && g >= range_end) || !VisibleLocked(g, show_incomplete)) return out;
        if (it->second.mode == mode) out.push_back(it->second.mode_step);
      }
      if (it == steps_.end()) return out;
      from = it->first;
    }
  }
  for (;;) {
    RoomForASlice(&out);
    LetWritersIn();
    absl::ReaderMutexLock lock(&mu_);
    auto entry = FindTensorLocked(tensor);
    if (!entry.ok()) return entry.status();
    const auto& steps = (*entry)->steps;
    // Both maps are in step order: walk them together instead of a lookup per
    // step (each step of either counts in the slice).
    auto it = steps.lower_bound(from);
    auto si = steps_.lower_bound(from);
    for (size_t n = 0; n < kStepsPerLockHold && it != steps.end(); ++n) {
      const uint64_t g = it->first;
      if (range_end != 0 && g >= range_end) return out;
      if (si == steps_.end()) return out;
      if (si->first < g) {
        ++si;
        continue;
      }
      if (si->first == g && VisibleLocked(g, show_incomplete)) {
        if (IsGlobalMode(mode)) {
          out.push_back(g);
        } else if (si->second.mode == mode) {
          out.push_back(si->second.mode_step);
        }
      }
      ++it;
    }
    if (it == steps.end()) return out;
    from = it->first;
  }
}

absl::StatusOr<std::vector<std::string>> Trial::TensorNames(std::optional<uint64_t> step, int mode,
                                                            const std::vector<std::string>& regex,
                                                            const std::string& collection) const {
  if (!regex.empty() && !collection.empty()) {
    return MakeError(Reason::kBadRequest,
                     "tensor_names accepts either regex or collection, not both");
  }
  TK_ASSIGN_OR_RETURN(const std::vector<std::unique_ptr<RE2>> patterns, CompileRegexes(regex));
  // A collection's members: the names saved under it, the names its
  // configuration lists, and saved names its include_regex matches (those
  // RE2 runs; the Python client matches the others). Its configuration is
  // merged and compiled before the scan takes the lock.
  bool configured = false;
  std::set<std::string> configured_names;
  std::vector<std::unique_ptr<RE2>> collection_patterns;
  if (!collection.empty()) {
    const auto merged = MergeCollections(CollectionConfigsByWorker());
    if (auto c = merged.find(collection); c != merged.end()) {
      configured = true;
      configured_names.insert(c->second.config.tensor_names().begin(),
                              c->second.config.tensor_names().end());
      collection_patterns = CompileCollectionRegexes(c->second.config);
    }
  }
  // Names saved under the collection, or that its configuration lists: they
  // need no regex.
  std::vector<bool> member;
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
      if (it == collections_.end() && !configured) return std::vector<std::string>();
      if (it != collections_.end()) members = &it->second;
    }
    for (const auto& [name, entry] : tensors_) {
      bool is_member = false;
      if (!collection.empty()) {
        is_member = (members != nullptr && members->count(name) != 0) ||
                    configured_names.count(name) != 0;
        if (!is_member && collection_patterns.empty()) continue;
      }
      if (global.has_value()) {
        if (entry.steps.count(*global) == 0) continue;
      } else if (!IsGlobalMode(mode) && !entry.HasMode(mode)) {
        continue;
      }
      candidates.push_back(&name);
      member.push_back(is_member);
    }
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string* name = candidates[i];
    if (!collection.empty() && !member[i]) {
      const bool any = std::any_of(collection_patterns.begin(), collection_patterns.end(),
                                   [&](const auto& p) { return RE2::PartialMatch(*name, *p); });
      if (!any) continue;
    }
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
  s.set_attempt(info.attempt);
  for (const v1::WorkerRestart& r : info.restarts) *s.add_restarts() = r;
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
  std::vector<int> modes;
  for (int m = 0; m < 8; ++m) {
    if ((step_modes_ >> m & 1) != 0) modes.push_back(m);
  }
  return modes;
}

std::map<std::string, std::vector<std::string>> Trial::Collections() const {
  absl::ReaderMutexLock lock(&mu_);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [c, names] : collections_) {
    out[c] = std::vector<std::string>(names.begin(), names.end());
  }
  return out;
}

CollectionConfigs Trial::CollectionConfigsByWorker() const {
  absl::ReaderMutexLock lock(&mu_);
  return collection_configs_;
}

std::vector<v1::CollectionInfo> Trial::CollectionInfos() const {
  std::map<std::string, std::vector<std::string>> saved = Collections();
  const std::map<std::string, MergedCollection> merged =
      MergeCollections(CollectionConfigsByWorker());
  std::set<std::string> names;
  for (const auto& [name, tensors] : saved) names.insert(name);
  for (const auto& [name, m] : merged) names.insert(name);
  std::vector<v1::CollectionInfo> out;
  out.reserve(names.size());
  for (const std::string& name : names) {
    v1::CollectionInfo& info = out.emplace_back();
    info.set_name(name);
    std::set<std::string> tensors;
    if (auto s = saved.find(name); s != saved.end()) tensors.insert(s->second.begin(), s->second.end());
    if (auto m = merged.find(name); m != merged.end()) {
      info.set_configured(true);
      *info.mutable_config() = m->second.config;
      for (const std::string& w : m->second.workers) info.add_configured_by(w);
      tensors.insert(m->second.config.tensor_names().begin(), m->second.config.tensor_names().end());
    }
    for (const std::string& t : tensors) info.add_tensor_names(t);
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
  const absl::Span<const uint16_t> ws = it->second.ids(worker_sets_);
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
  // The lock is taken for kStepsPerLockHold steps at a time.
  mu_.ReaderUnlock();
  RoomForASlice(&out);
  mu_.ReaderLock();
  entry_or = FindTensorLocked(tensor);
  if (!entry_or.ok()) return entry_or.status();
  for (uint64_t from = range_begin;;) {
    auto it = (*entry_or)->steps.lower_bound(from);
    for (size_t n = 0; n < kStepsPerLockHold; ++n, ++it) {
      if (it == (*entry_or)->steps.end()) return out;
      const uint64_t g = it->first;
      if (range_end != 0 && g >= range_end) return out;
      if (!tracker_.IsComplete(g)) return out;
      const StepInfo& info = steps_.at(g);
      if (!IsGlobalMode(mode) && info.mode != mode) continue;
      const absl::Span<const uint16_t> ws = it->second.ids(worker_sets_);
      uint16_t chosen = ws.front();
      if (wid >= 0) {
        if (std::find(ws.begin(), ws.end(), static_cast<uint16_t>(wid)) == ws.end()) continue;
        chosen = static_cast<uint16_t>(wid);
      }
      out.push_back(Located{g, info, worker_names_[chosen]});
    }
    if (it == (*entry_or)->steps.end()) return out;
    from = it->first;
    mu_.ReaderUnlock();  // the committer may apply a write between slices
    RoomForASlice(&out);
    LetWritersIn();
    mu_.ReaderLock();
    entry_or = FindTensorLocked(tensor);
    if (!entry_or.ok()) return entry_or.status();
  }
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
  for (uint16_t w : it->second.ids(worker_sets_)) out.push_back(worker_names_[w]);
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
