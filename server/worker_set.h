// WorkerSet: the workers that saved one tensor at one step, as ids into the
// trial's worker list (kept in the order the trial gives them), in 8 bytes.
//
// The trial's index holds one per (tensor, step): with most of its memory in
// them, their size is the collector's RAM per record stored. Up to three ids
// are held inline (a tensor is most often saved by one worker a step); a
// larger set lives in the trial's WorkerSetPool, referred to by its index.
// (An absl::InlinedVector<uint16_t, 2> took 24 bytes: ~39 bytes a record
// with its btree slot, against ~18 now.)
//
// Thread safety: none (Trial guards both with its lock).
#ifndef TENSORKEEP_SERVER_WORKER_SET_H_
#define TENSORKEEP_SERVER_WORKER_SET_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tensorkeep {

// The sets of more than WorkerSet::kInline workers of one trial. A set that
// moves here stays here for the trial's life (sets only grow).
class WorkerSetPool {
 public:
  uint32_t Add(std::vector<uint16_t> ids);
  std::vector<uint16_t>& at(uint32_t index) { return sets_[index]; }
  const std::vector<uint16_t>& at(uint32_t index) const { return sets_[index]; }
  size_t size() const { return sets_.size(); }

 private:
  std::vector<std::vector<uint16_t>> sets_;
};

class WorkerSet {
 public:
  static constexpr size_t kInline = 3;

  // The ids, in the order they were inserted at.
  absl::Span<const uint16_t> ids(const WorkerSetPool& pool) const;
  // Inserts `id` before position `index` (<= the set's size).
  void Insert(size_t index, uint16_t id, WorkerSetPool* pool);

 private:
  static constexpr uint16_t kPooled = 0xFFFF;
  uint32_t PoolIndex() const;

  uint16_t n_ = 0;                // ids held inline, or kPooled
  uint16_t slots_[kInline] = {};  // the ids, or the pool index in the first two
};

static_assert(sizeof(WorkerSet) == 8, "a WorkerSet is 8 bytes");

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_WORKER_SET_H_
