#include "server/step_tracker.h"

#include <algorithm>

namespace tensorkeep {

void StepTracker::DeclareWorkers(uint32_t n) {
  declared_ = std::max(declared_, n);
  Recompute();
}

void StepTracker::Grow(int id) {
  if (id >= static_cast<int>(committed_.size())) {
    committed_.resize(id + 1, kNone);
    states_.resize(id + 1, WorkerState::kActive);
  }
}

void StepTracker::Commit(int id, int64_t through) {
  Grow(id);
  committed_[id] = std::max(committed_[id], through);
  Recompute();
}

void StepTracker::Finish(int id) {
  Grow(id);
  committed_[id] = kAll;
  states_[id] = WorkerState::kClosed;
  Recompute();
}

void StepTracker::Lose(int id) {
  Grow(id);
  if (states_[id] == WorkerState::kActive) states_[id] = WorkerState::kLost;
  Recompute();
}

void StepTracker::Reactivate(int id) {
  Grow(id);
  if (states_[id] == WorkerState::kLost) states_[id] = WorkerState::kActive;
  Recompute();
}

void StepTracker::Restart(int id) {
  Grow(id);
  // complete_through_ only grows (Recompute): the steps complete now stay so.
  committed_[id] = kNone;
  states_[id] = WorkerState::kActive;
  Recompute();
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
  // Never lowered: a restarted worker's steps stay visible as incomplete.
  for (int64_t c : committed_) any_committed_ = std::max(any_committed_, c);
  const bool all_seen = committed_.size() >= declared_;
  const bool any_active = std::any_of(states_.begin(), states_.end(),
                                      [](WorkerState s) { return s == WorkerState::kActive; });
  if (all_seen && !any_active && !committed_.empty()) ended_ = true;
  if (ended_) {
    complete_through_ = kAll;
    return;
  }
  if (!all_seen || !any_active) return;  // completeness never goes back
  int64_t through = kAll;
  for (size_t i = 0; i < committed_.size(); ++i) {
    if (states_[i] == WorkerState::kActive) through = std::min(through, committed_[i]);
  }
  complete_through_ = std::max(complete_through_, through);
}

}  // namespace tensorkeep
