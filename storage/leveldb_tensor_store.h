// LevelDbTensorStore: TensorStore on one LevelDB database.
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

struct LevelDbOptions {
  // Directory of the database; created (with parents) when missing.
  std::string path;
  // Memtable size. 64 MiB measured best for 64 KiB-1 MiB tensor values on the
  // 2-core reference machine (docs/storage.md).
  size_t write_buffer_size = 64 << 20;
  // Block cache for reads of index entries and small values.
  size_t block_cache_bytes = 64 << 20;
  // Snappy saves nothing on float tensors and costs CPU; off by default.
  bool compression = false;
  // Not owned; must outlive the store. nullptr: the default (disk) Env.
  // Tests pass leveldb::NewMemEnv(...).
  leveldb::Env* env = nullptr;
};

class LevelDbTensorStore : public TensorStore {
 public:
  // Opens (creating if needed) the database at options.path. Fails with
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
