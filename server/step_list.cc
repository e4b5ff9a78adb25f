#include "server/step_list.h"

#include <algorithm>
#include <iterator>

namespace tensorkeep {
namespace {

// Late steps held apart before a merge, at least (a merge copies the array).
constexpr size_t kMinLateBeforeMerge = 1024;

}  // namespace

void StepList::Insert(uint64_t step) {
  if (sorted_.empty() || sorted_.back() < step) {
    sorted_.push_back(step);
    return;
  }
  late_.insert(step);
  if (late_.size() >= std::max(kMinLateBeforeMerge, sorted_.size() / 8)) MergeLate();
}

void StepList::MergeLate() {
  std::vector<uint64_t> merged;
  merged.reserve(sorted_.size() + late_.size());
  std::merge(sorted_.begin(), sorted_.end(), late_.begin(), late_.end(),
             std::back_inserter(merged));
  sorted_.swap(merged);
  late_.clear();
}

void StepList::AppendRange(uint64_t begin, uint64_t last, std::vector<uint64_t>* out) const {
  if (last < begin) return;
  auto first = std::lower_bound(sorted_.begin(), sorted_.end(), begin);
  auto end = std::upper_bound(first, sorted_.end(), last);
  if (late_.empty()) {
    out->insert(out->end(), first, end);
    return;
  }
  auto late_first = late_.lower_bound(begin);
  auto late_end = late_.upper_bound(last);
  out->reserve(out->size() + static_cast<size_t>(end - first) +
               static_cast<size_t>(std::distance(late_first, late_end)));
  std::merge(first, end, late_first, late_end, std::back_inserter(*out));
}

size_t StepList::MemoryBytes() const {
  // A btree node holds about 256 bytes of slots, and is most of its cost.
  return sorted_.capacity() * sizeof(uint64_t) + late_.size() * sizeof(uint64_t) * 2;
}

}  // namespace tensorkeep
