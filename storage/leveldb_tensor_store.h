// LevelDbTensorStore: TensorStore on one LevelDB database (the index) and a
// value log (storage/value_log.h) in one directory.
//
// Large values (KeyFamily::kValue) are appended to the value log, in the
// subdirectory kValuesSubdir; the index keeps, under each value's key, where
// its bytes are. Every other key (blocks, trial, worker and rule metadata, the
// format marker) is in the index database at the directory's root. Why: in
// LevelDB a value is written three times (log, memtable, table) and
// checksummed twice, and tables of values were compacted again when their
// keys overlapped; the value log writes each byte once. Measured in
// docs/performance.md (R4).
#ifndef TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_H_
#define TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/tensor_store.h"

namespace leveldb {
class Env;
}

namespace tensorkeep {

// The value log's subdirectory of LevelDbOptions::path.
inline constexpr char kValuesSubdir[] = "values";
// LevelDbOptions::value_lanes: value files open for appending at once, so
// that up to this many trials writing at the same time each fill files of
// their own (deleting one drops its files without copying).
inline constexpr size_t kDefaultValueLanes = 16;
// LevelDbOptions::value_gc_live_fraction: a value file half garbage is
// rewritten (copying costs at most as many bytes as it frees).
inline constexpr double kDefaultValueGcLiveFraction = 0.5;

struct LevelDbOptions {
  // Data directory; created (with parents) when missing.
  std::string path;
  // Memtable size of the index database (up to twice this while one is
  // written out).
  size_t write_buffer_size = 64 << 20;
  // Block cache of the index database (index entries and small values).
  size_t block_cache_bytes = 64 << 20;
  // A value log file is closed for writing once it holds this many bytes.
  uint64_t value_file_bytes = uint64_t{1} << 30;
  // Trials whose values go to value files of their own while they write at
  // the same time (storage/value_log.h, lanes); 1: every trial's values
  // interleaved in one file, as before lanes.
  size_t value_lanes = kDefaultValueLanes;
  // Snappy saves nothing on float tensors and costs CPU; off by default.
  bool compression = false;
  // Not owned; must outlive the store. nullptr: the default (disk) Env.
  // Tests pass leveldb::NewMemEnv(...).
  leveldb::Env* env = nullptr;
  // After a failed write, the least time between two attempts to reopen the
  // index database (each write in between fails at once).
  double reopen_interval_seconds = 1.0;
  // After a failed write on the default Env, the database is reopened only
  // once the directory's filesystem has this much free space (reopening
  // writes a table of the recovered log).
  uint64_t reopen_min_free_bytes = uint64_t{256} << 20;
  // The disk guard: a write that would leave less than this free on the
  // directory's filesystem is refused (ResourceExhausted with reason
  // STORAGE_FULL, naming the directory and the free space; nothing written),
  // so that the disk never fills under LevelDB and the collector can always
  // restart; writes go through again as soon as space is back. 0: off.
  uint64_t min_free_bytes = 0;
  // The free bytes the disk guard and the reopen check go by; unset: statvfs
  // of `path` (on the default Env only). Tests give their own.
  std::function<std::optional<uint64_t>()> free_bytes;
  // Space kept in `path`/RESERVE (storage/disk_reserve.h) so that the store
  // opens even on a filesystem something else filled: an open that fails for
  // want of space releases it and tries again (the disk guard then refuses
  // new data until space is freed), and it is taken back once the filesystem
  // has room for it besides min_free_bytes. It must exceed write_buffer_size
  // (opening writes the recovered log out as a table). Default Env only; 0: none.
  uint64_t start_reserve_bytes = 0;
  // ReclaimValueSpace rewrites (or drops) a value file once its live bytes
  // are at most this fraction of its size (--vlog-gc-threshold). 0: only
  // files that hold nothing live are dropped.
  double value_gc_live_fraction = kDefaultValueGcLiveFraction;
  // Tests: called at each stage of ReclaimValueSpace ("gc.copied": live
  // values appended to the new file, index not yet changed; "gc.indexed":
  // index changed, old file not yet removed; "gc.dropping": about to remove
  // the old file). A non-OK status stops the reclaim there, as a crash would.
  std::function<absl::Status(std::string_view stage)> fault_point;
};

class LevelDbTensorStore : public TensorStore {
 public:
  // Opens (creating if needed) the store at options.path. Fails with
  // FailedPrecondition when another process holds the database's lock, and
  // with DataLoss when the database is corrupt; the message names the path.
  static absl::StatusOr<std::unique_ptr<LevelDbTensorStore>> Open(const LevelDbOptions& options);

  // What the open had to do that an operator should know (e.g. that it
  // released the disk reserve to start on a full disk); empty if nothing.
  const std::string& open_note() const;

  ~LevelDbTensorStore() override;

  std::unique_ptr<Batch> NewBatch() override;
  // After a failed index write, LevelDB's log may hold a torn record that the
  // records written after it would follow, and a later recovery could drop
  // them with it; so the store refuses writes (Unavailable, naming the first
  // failure) until it has reopened the index database, which recovers the log
  // up to the torn record and starts a new one. Reads go on with the old
  // handle until the reopen; while a reopen keeps failing they fail with
  // Unavailable. A failed value-log append leaves no key (the index is not
  // written) and needs no reopen.
  absl::Status Write(Batch* batch, bool sync) override;
  absl::Status WriteAll(const std::vector<Batch*>& batches, bool sync) override;
  // Large values are read from the value log and checked against their
  // CRC-32: a damaged or truncated value file gives DataLoss naming the key's
  // file and offset.
  absl::StatusOr<std::optional<std::string>> Get(std::string_view key) override;
  absl::StatusOr<std::optional<std::string>> GetBulk(std::string_view key) override;
  // A large value's bytes are read from the value log piece by piece.
  absl::StatusOr<std::unique_ptr<BulkReader>> OpenBulk(std::string_view key) override;
  absl::Status Scan(
      std::string_view prefix,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) override;
  absl::Status ScanKeys(std::string_view prefix, std::string_view from,
                        const std::function<bool(std::string_view key, size_t entry_bytes)>& fn) override;
  absl::Status Compact(std::string_view begin, std::string_view end) override;
  // A deleted large value's bytes are counted as garbage of its file (in
  // the index, in the same atomic write as the deletion); see TensorStore.
  absl::StatusOr<ReclaimStats> ReclaimValueSpace() override;
  SpaceStats Space() override;

 private:
  struct Impl;
  // Reopens the index database after a failed write (see Write).
  absl::Status RepairAfterFailure();
  // Free bytes of the directory's filesystem (LevelDbOptions::free_bytes, or
  // statvfs on the default Env); std::nullopt when unknown.
  std::optional<uint64_t> MeasureFreeBytes() const;
  // Takes the disk reserve back when it is not held and the filesystem has
  // room for it besides min_free_bytes and a write of `bytes`.
  void TakeReserveIfRoom(uint64_t bytes);
  // The disk guard (LevelDbOptions::min_free_bytes) for a write of `bytes`.
  absl::Status CheckFreeSpace(uint64_t bytes);
  // The value a large value's index entry `encoded_ref` points to. When the
  // file is gone (ReclaimValueSpace moved the value meanwhile), the entry is
  // read again and the value read where it points now.
  absl::StatusOr<std::string> ReadValue(std::string_view key, std::string_view encoded_ref);
  // The index entry of `key` (db_mu taken shared).
  absl::StatusOr<std::optional<std::string>> GetEntry(std::string_view key);
  // Counts the values `batches` delete as garbage of their files: adds the
  // new totals to `index` and returns them (applied once the write is in).
  std::map<uint64_t, uint64_t> CountDeletedValues(const std::vector<Batch*>& batches,
                                                  void* index);
  // ReclaimValueSpace for one file: copies its live values (`live`: key,
  // encoded entry) to a file of the value log's own lane (not a trial's), then removes it.
  absl::Status ReclaimFile(uint64_t file,
                           const std::vector<std::pair<std::string, std::string>>& live,
                           ReclaimStats* stats);
  absl::Status Fault(std::string_view stage) const;
  // One round of ReclaimValueSpace; *recounted: it found files whose garbage
  // was under-counted that now qualify.
  absl::Status ReclaimRound(ReclaimStats* stats, bool* recounted);
  explicit LevelDbTensorStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_H_
