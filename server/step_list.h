// StepList: a trial's saved global steps, in order, for listing them fast.
//
// Steps arrive in increasing order but for late ones (another worker's
// earlier steps, a writer that starts behind the others). Appends go to a
// sorted array, which lists a range by copying a slice of it (walking a btree
// cost ~40 ns a step: most of the time of listing 100,000 steps). A late step
// goes to a small btree instead of being inserted into the array: inserting
// in the middle moved every later step, so a writer whose steps all come
// before another worker's made each insert O(n) and the whole O(n^2) on the
// committer's thread (100,000 steps took seconds, 1,000,000 hours). The btree
// is merged into the array once it holds an eighth of it: O(1) amortized per
// late step, and a listing merges at most that much.
//
// Thread safety: none (Trial guards it with its lock).
#ifndef TENSORKEEP_SERVER_STEP_LIST_H_
#define TENSORKEEP_SERVER_STEP_LIST_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"

namespace tensorkeep {

class StepList {
 public:
  // Adds `step`, which must not be in the list yet.
  void Insert(uint64_t step);
  // The steps s with begin <= s <= last, in order, appended to *out: at most
  // `max_count` of them, the first ones. Returns how many were appended.
  size_t AppendRange(uint64_t begin, uint64_t last, std::vector<uint64_t>* out,
                     size_t max_count = SIZE_MAX) const;
  // About how many steps AppendRange(begin, last) lists, to reserve room for
  // them: exact without late steps, at most late_size() off with them.
  // O(log n).
  size_t EstimateRange(uint64_t begin, uint64_t last) const;
  size_t size() const { return sorted_.size() + late_.size(); }
  size_t late_size() const { return late_.size(); }
  // Heap bytes held (metrics, tests).
  size_t MemoryBytes() const;

 private:
  using Iter = std::vector<uint64_t>::const_iterator;
  void MergeLate();
  // The run of sorted_ with begin <= s <= last.
  std::pair<Iter, Iter> SortedRange(uint64_t begin, uint64_t last) const;

  std::vector<uint64_t> sorted_;    // every step but the late ones, in order
  absl::btree_set<uint64_t> late_;  // steps below sorted_.back() when they came
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_STEP_LIST_H_
