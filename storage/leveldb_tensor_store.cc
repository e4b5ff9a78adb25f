#include "storage/leveldb_tensor_store.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "leveldb/cache.h"
#include "leveldb/db.h"
#include "leveldb/env.h"
#include "leveldb/filter_policy.h"
#include "leveldb/write_batch.h"
#include "storage/pread_env.h"

namespace tensorkeep {
namespace {

class LevelDbBatch : public TensorStore::Batch {
 public:
  void Put(std::string_view key, std::string_view value) override {
    batch_.Put(leveldb::Slice(key.data(), key.size()),
               leveldb::Slice(value.data(), value.size()));
  }
  void Delete(std::string_view key) override {
    batch_.Delete(leveldb::Slice(key.data(), key.size()));
  }
  size_t ApproximateSize() const override { return batch_.ApproximateSize(); }
  leveldb::WriteBatch* batch() { return &batch_; }

 private:
  leveldb::WriteBatch batch_;
};

absl::Status FromLevelDb(const leveldb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat(what, ": ", s.ToString()));
  if (s.IsCorruption()) return absl::DataLossError(absl::StrCat(what, ": ", s.ToString()));
  if (s.IsInvalidArgument()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.ToString()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

}  // namespace

struct LevelDbTensorStore::Impl {
  std::unique_ptr<leveldb::Env> env;  // the pread Env, when not given one
  std::unique_ptr<leveldb::Cache> cache;
  std::unique_ptr<const leveldb::FilterPolicy> filter;
  std::unique_ptr<leveldb::DB> db;
};

LevelDbTensorStore::LevelDbTensorStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LevelDbTensorStore::~LevelDbTensorStore() {
  impl_->db.reset();  // before the Env, cache and filter it uses
}

absl::StatusOr<std::unique_ptr<LevelDbTensorStore>> LevelDbTensorStore::Open(
    const LevelDbOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("empty database path");
  if (options.env == nullptr) {
    std::error_code ec;
    std::filesystem::create_directories(options.path, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create data directory ", options.path, ": ", ec.message()));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->cache.reset(leveldb::NewLRUCache(options.block_cache_bytes));
  impl->filter.reset(leveldb::NewBloomFilterPolicy(10));
  leveldb::Options opts;
  opts.create_if_missing = true;
  opts.write_buffer_size = options.write_buffer_size;
  opts.max_file_size = 64 << 20;
  opts.block_cache = impl->cache.get();
  opts.filter_policy = impl->filter.get();
  opts.compression = options.compression ? leveldb::kSnappyCompression : leveldb::kNoCompression;
  if (options.env != nullptr) {
    opts.env = options.env;
  } else {
    impl->env = NewPreadEnv(leveldb::Env::Default());
    opts.env = impl->env.get();
    // One descriptor per open table (64 MiB each): 500 cover ~32 GB before
    // LevelDB closes and reopens tables, well inside the usual 1024 limit.
    opts.max_open_files = 500;
  }
  leveldb::DB* db = nullptr;
  leveldb::Status s = leveldb::DB::Open(opts, options.path, &db);
  if (!s.ok()) {
    const std::string text = s.ToString();
    if (text.find("lock") != std::string::npos || text.find("LOCK") != std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", options.path,
          " is in use by another tensorkeep-server (its LevelDB lock is held): stop that "
          "server or choose another --data-dir (",
          text, ")"));
    }
    return FromLevelDb(s, absl::StrCat("opening database in ", options.path));
  }
  impl->db.reset(db);
  return std::unique_ptr<LevelDbTensorStore>(new LevelDbTensorStore(std::move(impl)));
}

std::unique_ptr<TensorStore::Batch> LevelDbTensorStore::NewBatch() {
  return std::make_unique<LevelDbBatch>();
}

absl::Status LevelDbTensorStore::Write(Batch* batch, bool sync) {
  leveldb::WriteOptions wo;
  wo.sync = sync;
  return FromLevelDb(impl_->db->Write(wo, static_cast<LevelDbBatch*>(batch)->batch()),
                     "writing to the database");
}

namespace {

absl::StatusOr<std::optional<std::string>> GetWith(leveldb::DB* db, const leveldb::ReadOptions& ro,
                                                   std::string_view key) {
  std::string value;
  leveldb::Status s = db->Get(ro, leveldb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return FromLevelDb(s, "reading from the database");
  return std::optional<std::string>(std::move(value));
}

}  // namespace

absl::StatusOr<std::optional<std::string>> LevelDbTensorStore::Get(std::string_view key) {
  return GetWith(impl_->db.get(), leveldb::ReadOptions(), key);
}

absl::StatusOr<std::optional<std::string>> LevelDbTensorStore::GetBulk(std::string_view key) {
  leveldb::ReadOptions ro;
  ro.fill_cache = false;
  return GetWith(impl_->db.get(), ro, key);
}

absl::Status LevelDbTensorStore::Scan(
    std::string_view prefix,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) {
  leveldb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<leveldb::Iterator> it(impl_->db->NewIterator(ro));
  for (it->Seek(leveldb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
    const leveldb::Slice k = it->key();
    std::string_view key(k.data(), k.size());
    if (key.substr(0, prefix.size()) != prefix) break;
    const leveldb::Slice v = it->value();
    if (!fn(key, std::string_view(v.data(), v.size()))) break;
  }
  return FromLevelDb(it->status(), "scanning the database");
}

}  // namespace tensorkeep
