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

size_t StepList::AppendRange(uint64_t begin, uint64_t last, std::vector<uint64_t>* out,
                             size_t max_count) const {
  if (last < begin || max_count == 0) return 0;
  auto [first, end] = SortedRange(begin, last);
  if (late_.empty()) {
    const size_t n = std::min(max_count, static_cast<size_t>(end - first));
    out->insert(out->end(), first, first + static_cast<std::ptrdiff_t>(n));
    return n;
  }
  auto late_first = late_.lower_bound(begin);
  auto late_end = late_.upper_bound(last);
  // A merge of the two that stops after max_count.
  size_t n = 0;
  for (; n < max_count && (first != end || late_first != late_end); ++n) {
    if (late_first == late_end || (first != end && *first < *late_first)) {
      out->push_back(*first++);
    } else {
      out->push_back(*late_first++);
    }
  }
  return n;
}

std::pair<StepList::Iter, StepList::Iter> StepList::SortedRange(uint64_t begin,
                                                                uint64_t last) const {
  auto first = std::lower_bound(sorted_.begin(), sorted_.end(), begin);
  return {first, std::upper_bound(first, sorted_.end(), last)};
}

size_t StepList::EstimateRange(uint64_t begin, uint64_t last) const {
  if (last < begin) return 0;
  const auto [first, end] = SortedRange(begin, last);
  const auto in_sorted = static_cast<size_t>(end - first);
  // (No late step without a step in the array: a first step is appended.)
  if (late_.empty()) return in_sorted;
  // The late steps in range would need a walk: as many as the array's share
  // of them, about.
  return in_sorted + std::min(late_.size(), late_.size() * in_sorted / sorted_.size() + 1);
}

size_t StepList::MemoryBytes() const {
  // A btree node holds about 256 bytes of slots, and is most of its cost.
  return sorted_.capacity() * sizeof(uint64_t) + late_.size() * sizeof(uint64_t) * 2;
}

}  // namespace tensorkeep
