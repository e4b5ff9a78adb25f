#include "server/step_tracker.h"

#include <algorithm>

namespace tensorkeep {

void StepTracker::DeclareWorkers(uint32_t n) {
  declared_ = std::max(declared_, n);
  Recompute();
}

void StepTracker::Grow(int id) {
  if (id >= static_cast<int>(committed_.size())) {
    for (int i = static_cast<int>(committed_.size()); i <= id; ++i) {
      active_committed_.insert(kNone);  // a new worker is ACTIVE with nothing committed
    }
    committed_.resize(id + 1, kNone);
    states_.resize(id + 1, WorkerState::kActive);
  }
}

template <typename F>
void StepTracker::Change(int id, F change) {
  Grow(id);
  if (states_[id] == WorkerState::kActive) {
    active_committed_.erase(active_committed_.find(committed_[id]));
  }
  change();
  if (states_[id] == WorkerState::kActive) active_committed_.insert(committed_[id]);
  // Never lowered: a restarted worker's steps stay visible as incomplete.
  any_committed_ = std::max(any_committed_, committed_[id]);
  Recompute();
}

void StepTracker::Commit(int id, int64_t through) {
  Change(id, [&] { committed_[id] = std::max(committed_[id], through); });
}

void StepTracker::Finish(int id) {
  Change(id, [&] {
    committed_[id] = kAll;
    states_[id] = WorkerState::kClosed;
  });
}

void StepTracker::Lose(int id) {
  Change(id, [&] {
    if (states_[id] == WorkerState::kActive) states_[id] = WorkerState::kLost;
  });
}

void StepTracker::Reactivate(int id) {
  Change(id, [&] {
    if (states_[id] == WorkerState::kLost) states_[id] = WorkerState::kActive;
  });
}

void StepTracker::Restart(int id) {
  // complete_through_ only grows (Recompute): the steps complete now stay so.
  Change(id, [&] {
    committed_[id] = kNone;
    states_[id] = WorkerState::kActive;
  });
}

void StepTracker::RaiseFloor(int64_t through) {
  complete_through_ = std::max(complete_through_, through);
}

void StepTracker::End() {
  ended_ = true;
  Recompute();
}

uint32_t StepTracker::expected_workers() const {
  return std::max<uint32_t>(declared_, static_cast<uint32_t>(committed_.size()));
}

int64_t StepTracker::committed(int id) const {
  return id < static_cast<int>(committed_.size()) ? committed_[id] : kNone;
}

WorkerState StepTracker::state(int id) const {
  return id < static_cast<int>(states_.size()) ? states_[id] : WorkerState::kActive;
}

void StepTracker::Recompute() {
  const bool all_seen = committed_.size() >= declared_;
  const bool any_active = !active_committed_.empty();
  if (all_seen && !any_active && !committed_.empty()) ended_ = true;
  if (ended_) {
    complete_through_ = kAll;
    return;
  }
  if (!all_seen || !any_active) return;  // completeness never goes back
  complete_through_ = std::max(complete_through_, *active_committed_.begin());
}

}  // namespace tensorkeep
