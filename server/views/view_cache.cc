#include "server/views/view_cache.h"

namespace tensorkeep {

std::shared_ptr<const void> ViewCache::Lookup(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

void ViewCache::Insert(const std::string& key, std::shared_ptr<const void> value, size_t bytes) {
  bytes += key.size() + sizeof(Entry);
  if (bytes > capacity_) return;
  auto memory = budget_->Reserve(bytes, "the HTTP views' cache");
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->memory.bytes();
    lru_.erase(it->second);
    index_.erase(it);
  }
  while (!lru_.empty() && bytes_ + bytes > capacity_) {
    bytes_ -= lru_.back().memory.bytes();
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  if (!memory.ok()) return;  // the budget is in use: keep nothing new
  lru_.push_front(Entry{key, std::move(value), std::move(*memory)});
  index_[key] = lru_.begin();
  bytes_ += bytes;
}

size_t ViewCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ViewCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace tensorkeep
