#include "server/step_tracker.h"

#include <algorithm>

namespace tensorkeep {

void StepTracker::DeclareWorkers(uint32_t n) {
  declared_ = std::max(declared_, n);
  Recompute();
}

void StepTracker::Commit(int id, int64_t through) {
  if (id >= static_cast<int>(committed_.size())) {
    committed_.resize(id + 1, kNone);
    finished_.resize(id + 1, false);
  }
  committed_[id] = std::max(committed_[id], through);
  Recompute();
}

void StepTracker::Finish(int id) {
  Commit(id, kAll);
  finished_[id] = true;
  Recompute();
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

void StepTracker::Recompute() {
  any_committed_ = kNone;
  for (int64_t c : committed_) any_committed_ = std::max(any_committed_, c);
  all_finished_ = committed_.size() >= declared_ &&
                  std::all_of(finished_.begin(), finished_.end(), [](bool f) { return f; });
  if (ended()) {
    complete_through_ = kAll;
    return;
  }
  if (committed_.size() < declared_) {
    complete_through_ = kNone;
    return;
  }
  complete_through_ = *std::min_element(committed_.begin(), committed_.end());
}

}  // namespace tensorkeep
