#include "server/value_cache.h"

namespace tensorkeep {
namespace {

using Entry = std::shared_ptr<const std::string>;

void DeleteEntry(const leveldb::Slice& /*key*/, void* value) { delete static_cast<Entry*>(value); }

// leveldb's LRU cache splits its capacity over 16 shards.
constexpr size_t kShards = 16;

}  // namespace

ValueCache::ValueCache(size_t capacity_bytes)
    : shard_capacity_(capacity_bytes / kShards),
      cache_(capacity_bytes == 0 ? nullptr : leveldb::NewLRUCache(capacity_bytes)) {}

ValueCache::~ValueCache() = default;

std::shared_ptr<const std::string> ValueCache::Lookup(std::string_view key) const {
  if (cache_ == nullptr) return nullptr;
  leveldb::Cache::Handle* h = cache_->Lookup(leveldb::Slice(key.data(), key.size()));
  if (h == nullptr) return nullptr;
  Entry out = *static_cast<Entry*>(cache_->Value(h));
  cache_->Release(h);
  return out;
}

void ValueCache::Insert(std::string_view key, std::shared_ptr<const std::string> value) {
  if (cache_ == nullptr || value == nullptr) return;
  const size_t charge = value->size() + key.size();
  if (charge > shard_capacity_) return;  // would evict its whole shard, then itself
  cache_->Release(cache_->Insert(leveldb::Slice(key.data(), key.size()), new Entry(std::move(value)),
                                 charge, &DeleteEntry));
}

}  // namespace tensorkeep
