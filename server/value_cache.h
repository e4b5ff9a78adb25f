// ValueCache: the bytes of recently reduced large values, shared without
// copying.
//
// A rule worker typically asks for several reductions of the same tensor in
// separate calls (min, then max, then a histogram); each used to read the
// value out of LevelDB again (a pread and a copy: ~0.5 ms for 4 MiB, more
// than computing the reduction). Keys are value keys, which name the record
// block of the write (storage/keys.h): a rewrite of a step goes to new keys,
// so an entry is never stale. Built on LevelDB's sharded LRU cache; a value
// larger than a shard's share (capacity / 16) is not kept.
//
// Thread safety: every method is thread-safe.
#ifndef TENSORKEEP_SERVER_VALUE_CACHE_H_
#define TENSORKEEP_SERVER_VALUE_CACHE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "leveldb/cache.h"

namespace tensorkeep {

class ValueCache {
 public:
  // capacity 0: caches nothing.
  explicit ValueCache(size_t capacity_bytes);
  ~ValueCache();
  ValueCache(const ValueCache&) = delete;
  ValueCache& operator=(const ValueCache&) = delete;

  std::shared_ptr<const std::string> Lookup(std::string_view key) const;
  void Insert(std::string_view key, std::shared_ptr<const std::string> value);

 private:
  const size_t shard_capacity_;
  std::unique_ptr<leveldb::Cache> cache_;  // null when capacity is 0
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_VALUE_CACHE_H_
