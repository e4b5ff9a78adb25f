// LevelDbTensorStore's state, shared by the files that implement it
// (leveldb_tensor_store.cc: opening, writes and reads; value_reclaim.cc:
// the value log's garbage collection). Internal to storage/: include
// storage/leveldb_tensor_store.h instead.
#ifndef TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_IMPL_H_
#define TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_IMPL_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "leveldb/cache.h"
#include "leveldb/db.h"
#include "leveldb/env.h"
#include "leveldb/filter_policy.h"
#include "storage/disk_reserve.h"
#include "storage/leveldb_tensor_store.h"
#include "storage/value_log.h"

namespace tensorkeep {

struct LevelDbTensorStore::Impl {
  LevelDbOptions options;
  leveldb::Options db_options;        // to reopen the index database
  std::unique_ptr<leveldb::Env> env;  // the pread Env, when not given one
  std::unique_ptr<leveldb::Cache> cache;
  std::unique_ptr<const leveldb::FilterPolicy> filter;
  std::unique_ptr<ValueLog> values;
  std::unique_ptr<DiskReserve> reserve;  // null without a reserve
  std::string open_note;

  // Writes one at a time; a reopen happens only under write_mu and db_mu.
  absl::Mutex write_mu ABSL_ACQUIRED_BEFORE(db_mu);
  // The failed write that must be repaired (a reopen) before the next one.
  absl::Status failed ABSL_GUARDED_BY(write_mu);
  std::chrono::steady_clock::time_point next_reopen ABSL_GUARDED_BY(write_mu);
  // The disk guard: free bytes as last measured, less what was written since,
  // and when to measure again.
  uint64_t free_estimate ABSL_GUARDED_BY(write_mu) = 0;
  bool reserve_held ABSL_GUARDED_BY(write_mu) = false;
  // Released to open on a full disk and not taken back yet.
  bool reserve_released ABSL_GUARDED_BY(write_mu) = false;
  std::chrono::steady_clock::time_point next_free_check ABSL_GUARDED_BY(write_mu);
  // Value file -> its garbage bytes, as stored under ValueGarbageKey.
  std::map<uint64_t, uint64_t> garbage ABSL_GUARDED_BY(write_mu);
  // One ReclaimValueSpace at a time.
  absl::Mutex reclaim_mu ABSL_ACQUIRED_BEFORE(write_mu);

  // Readers hold db_mu shared while they use `index`; a reopen exclusively.
  // (The writer, holding write_mu, reads `index` without it: only a holder of
  // both changes it.)
  absl::Mutex db_mu;
  std::unique_ptr<leveldb::DB> index;  // null while a reopen keeps failing
};

// A LevelDB status as an absl one, `what` saying what was being done.
absl::Status FromLevelDb(const leveldb::Status& s, absl::string_view what);

// "the value under key <key bytes as hex>", for messages about a value that
// cannot be read (the collector adds the tensor's name and step).
std::string DescribeValueKey(std::string_view key);

// What a reader gets while a reopen after a failed write keeps failing.
absl::Status Reopening();

}  // namespace tensorkeep

#endif  // TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_IMPL_H_
