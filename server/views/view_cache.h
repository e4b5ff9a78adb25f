// ViewCache: results the HTTP views computed from stored values (a tensor's
// reduction series, each step's distribution), kept for the next request:
// a page that redraws, zooms or updates live recomputes only what is new.
// Bounded: least recently used entries go first once `capacity_bytes` are
// held, and every entry holds its bytes of the collector's memory budget
// (server/memory_budget.h); an entry that cannot get them is not kept.
// Entries are immutable (shared_ptr<const T>); a key's entry is replaced, not
// changed.
//
// Thread safety: thread-safe.
#ifndef TENSORKEEP_SERVER_VIEWS_VIEW_CACHE_H_
#define TENSORKEEP_SERVER_VIEWS_VIEW_CACHE_H_

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/memory_budget.h"

namespace tensorkeep {

class ViewCache {
 public:
  // `budget` (not owned) must outlive the cache.
  ViewCache(MemoryBudget* budget, size_t capacity_bytes)
      : budget_(budget), capacity_(capacity_bytes) {}

  template <typename T>
  std::shared_ptr<const T> Get(const std::string& key) {
    return std::static_pointer_cast<const T>(Lookup(key));
  }
  template <typename T>
  void Put(const std::string& key, std::shared_ptr<const T> value, size_t bytes) {
    Insert(key, std::static_pointer_cast<const void>(std::move(value)), bytes);
  }

  size_t bytes() const;
  size_t entries() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const void> value;
    MemoryBudget::Reservation memory;
  };
  std::shared_ptr<const void> Lookup(const std::string& key);
  void Insert(const std::string& key, std::shared_ptr<const void> value, size_t bytes);

  MemoryBudget* const budget_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_VIEWS_VIEW_CACHE_H_
