#include "server/worker_set.h"

#include <cstring>
#include <limits>
#include <utility>

namespace tensorkeep {

uint32_t WorkerSetPool::Add(std::vector<uint16_t> ids) {
  sets_.push_back(std::move(ids));
  return static_cast<uint32_t>(sets_.size() - 1);
}

uint32_t WorkerSet::PoolIndex() const {
  uint32_t index;
  std::memcpy(&index, slots_, sizeof(index));
  return index;
}

absl::Span<const uint16_t> WorkerSet::ids(const WorkerSetPool& pool) const {
  if (n_ == kPooled) return absl::MakeConstSpan(pool.at(PoolIndex()));
  return absl::MakeConstSpan(slots_, n_);
}

void WorkerSet::Insert(size_t index, uint16_t id, WorkerSetPool* pool) {
  if (n_ == kPooled) {
    std::vector<uint16_t>& ids = pool->at(PoolIndex());
    ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(index), id);
    return;
  }
  if (n_ < kInline) {
    for (size_t i = n_; i > index; --i) slots_[i] = slots_[i - 1];
    slots_[index] = id;
    ++n_;
    return;
  }
  std::vector<uint16_t> ids(slots_, slots_ + n_);
  ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(index), id);
  const uint32_t at = pool->Add(std::move(ids));
  std::memcpy(slots_, &at, sizeof(at));
  n_ = kPooled;
}

}  // namespace tensorkeep
