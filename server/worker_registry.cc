#include "server/worker_registry.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "base/errors.h"

namespace tensorkeep {

WorkerRegistry::WorkerRegistry(const WorkerRegistryOptions& options, OnTimeout on_timeout)
    : options_(options), on_timeout_(std::move(on_timeout)) {
  thread_ = std::thread([this] { Run(); });
}

void WorkerRegistry::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

WorkerRegistry::~WorkerRegistry() { Stop(); }

absl::StatusOr<uint64_t> WorkerRegistry::Claim(const std::string& trial,
                                               const std::string& worker, bool resume) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({trial, worker});
  if (it != entries_.end() && it->second.claim != 0) {
    if (!resume) {
      // A first stream: another process writes as this worker (e.g. every
      // rank of a distributed job named worker_0). Retrying cannot help.
      return MakeError(
          Reason::kConflict,
          absl::StrCat("worker '", worker, "' of trial '", trial,
                       "' already has a live Push stream on this collector: two processes may "
                       "not write as the same worker (give each its own name, e.g. "
                       "worker_<rank>; the PyTorch hook takes the rank from torch.distributed "
                       "or the RANK environment variable when its first step starts)"));
    }
    return absl::UnavailableError(absl::StrCat(
        "worker '", worker, "' of trial '", trial,
        "' already has a live Push stream on this collector: a writer reconnecting after a "
        "dropped stream gets in once the collector has seen the old stream end"));
  }
  if (live_ >= options_.max_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the collector has ", live_,
                     " live Push streams, its limit: retry later, or "
                     "raise tensorkeep-server --max-push-streams"));
  }
  if (it == entries_.end()) it = entries_.emplace(Key{trial, worker}, Entry{}).first;
  const uint64_t id = next_id_++;
  it->second.claim = id;
  it->second.generation = id;
  SetDeadlineLocked(it->first, &it->second, absl::InfiniteFuture());
  ++live_;
  return id;
}

void WorkerRegistry::SetDeadlineLocked(const Key& key, Entry* entry, absl::Time deadline) {
  if (entry->deadline != absl::InfiniteFuture()) deadlines_.erase({entry->deadline, key});
  entry->deadline = deadline;
  if (deadline != absl::InfiniteFuture()) deadlines_.insert({deadline, key});
}

void WorkerRegistry::StartAbsenceLocked(const Key& key, Entry* entry) {
  entry->generation = next_id_++;
  if (options_.timeout > absl::ZeroDuration()) {
    SetDeadlineLocked(key, entry, absl::Now() + options_.timeout);
    changed_.Signal();
  }
}

void WorkerRegistry::Release(const std::string& trial, const std::string& worker, uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({trial, worker});
  if (it == entries_.end() || it->second.claim != id || id == 0) return;
  it->second.claim = 0;
  --live_;
  StartAbsenceLocked(it->first, &it->second);
  if (it->second.deadline == absl::InfiniteFuture()) entries_.erase(it);
}

void WorkerRegistry::Expect(const std::string& trial, const std::string& worker) {
  absl::MutexLock lock(&mu_);
  auto [it, fresh] = entries_.emplace(Key{trial, worker}, Entry{});
  if (!fresh && it->second.claim != 0) return;  // connected already
  StartAbsenceLocked(it->first, &it->second);
  if (it->second.deadline == absl::InfiniteFuture()) entries_.erase(it);
}

bool WorkerRegistry::StillGone(const std::string& trial, const std::string& worker,
                               uint64_t generation) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({trial, worker});
  // No entry: no stream claimed it since its timeout passed (a claim makes one).
  if (it == entries_.end()) return true;
  return it->second.claim == 0 && it->second.generation == generation;
}

bool WorkerRegistry::Connected(const std::string& trial, const std::string& worker) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({trial, worker});
  return it != entries_.end() && it->second.claim != 0;
}

size_t WorkerRegistry::live_streams() const {
  absl::MutexLock lock(&mu_);
  return live_;
}

void WorkerRegistry::Run() {
  struct Due {
    std::string trial, worker;
    uint64_t generation;
  };
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    // Only the absences past their deadline, soonest first (wakes come per
    // stream end: a walk over every entry made them O(workers) each).
    const absl::Time now = absl::Now();
    std::vector<Due> due;
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const Key key = deadlines_.begin()->second;
      deadlines_.erase(deadlines_.begin());
      auto it = entries_.find(key);
      if (it == entries_.end() || it->second.claim != 0) continue;  // (never: kept in step)
      due.push_back(Due{key.first, key.second, it->second.generation});
      entries_.erase(it);
    }
    const absl::Time next =
        deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
    if (!due.empty()) {
      mu_.Unlock();
      for (const Due& d : due) on_timeout_(d.trial, d.worker, d.generation);
      mu_.Lock();
      continue;
    }
    changed_.WaitWithDeadline(&mu_, next);
  }
}

}  // namespace tensorkeep
