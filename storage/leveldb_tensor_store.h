// LevelDbTensorStore: TensorStore on two LevelDB databases in one directory.
//
// Large values (KeyFamily::kValue) live in a database of their own, in the
// subdirectory kValuesSubdir; every other key (blocks, trial, worker and rule
// metadata, the format marker) in the index database at the directory's root.
// Why: LevelDB writes a memtable whose keys do not overlap the tables below
// straight to a deeper level, and moves such tables down without rewriting
// them. Values alone are step-major, so a writer's values append and are never
// compacted; mixed with the small families in every memtable, each table
// spanned the whole key space and every byte was compacted again (measured:
// 134 MB rewritten per 268 MB of 1 MiB values; 15-20 % of the collector's CPU).
#ifndef TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_H_
#define TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "storage/tensor_store.h"

namespace leveldb {
class Env;
}

namespace tensorkeep {

// The values database's subdirectory of LevelDbOptions::path.
inline constexpr char kValuesSubdir[] = "values";

struct LevelDbOptions {
  // Data directory; created (with parents) when missing.
  std::string path;
  // Memtable size of each database (up to twice this per database while one
  // is written out). 64 MiB measured best for 64 KiB-1 MiB tensor values on
  // the 2-core reference machine (docs/architecture.md, Storage).
  size_t write_buffer_size = 64 << 20;
  // Block cache, shared by both databases, for reads of index entries and small values.
  size_t block_cache_bytes = 64 << 20;
  // Snappy saves nothing on float tensors and costs CPU; off by default.
  bool compression = false;
  // Not owned; must outlive the store. nullptr: the default (disk) Env.
  // Tests pass leveldb::NewMemEnv(...).
  leveldb::Env* env = nullptr;
};

class LevelDbTensorStore : public TensorStore {
 public:
  // Opens (creating if needed) the databases at options.path. Fails with
  // FailedPrecondition when another process holds the database's lock, and
  // with DataLoss when the database is corrupt; the message names the path.
  static absl::StatusOr<std::unique_ptr<LevelDbTensorStore>> Open(const LevelDbOptions& options);

  ~LevelDbTensorStore() override;

  std::unique_ptr<Batch> NewBatch() override;
  absl::Status Write(Batch* batch, bool sync) override;
  absl::StatusOr<std::optional<std::string>> Get(std::string_view key) override;
  absl::StatusOr<std::optional<std::string>> GetBulk(std::string_view key) override;
  absl::Status Scan(
      std::string_view prefix,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) override;

 private:
  struct Impl;
  explicit LevelDbTensorStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_STORAGE_LEVELDB_TENSOR_STORE_H_
