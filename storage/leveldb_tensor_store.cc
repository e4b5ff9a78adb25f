#include "storage/leveldb_tensor_store.h"

#include <atomic>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "leveldb/cache.h"
#include "leveldb/db.h"
#include "leveldb/env.h"
#include "leveldb/filter_policy.h"
#include "base/status_macros.h"
#include "leveldb/write_batch.h"
#include "storage/keys.h"
#include "storage/pread_env.h"

namespace tensorkeep {
namespace {

// Which database a key lives in: large values in their own (kValues), every
// other key in the index database.
enum Db { kIndex = 0, kValues = 1, kNumDbs = 2 };

Db DbOf(std::string_view key) {
  return !key.empty() && static_cast<uint8_t>(key[0]) == static_cast<uint8_t>(KeyFamily::kValue)
             ? kValues
             : kIndex;
}

class LevelDbBatch : public TensorStore::Batch {
 public:
  void Put(std::string_view key, std::string_view value) override {
    const Db db = DbOf(key);
    used_[db] = true;
    batches_[db].Put(leveldb::Slice(key.data(), key.size()),
                     leveldb::Slice(value.data(), value.size()));
  }
  void Delete(std::string_view key) override {
    const Db db = DbOf(key);
    used_[db] = true;
    batches_[db].Delete(leveldb::Slice(key.data(), key.size()));
  }
  size_t ApproximateSize() const override {
    return batches_[kIndex].ApproximateSize() + batches_[kValues].ApproximateSize();
  }
  leveldb::WriteBatch* batch(Db db) { return &batches_[db]; }
  bool used(Db db) const { return used_[db]; }

 private:
  leveldb::WriteBatch batches_[kNumDbs];
  bool used_[kNumDbs] = {false, false};
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
  std::unique_ptr<leveldb::DB> dbs[kNumDbs];
  // The values database took a write without sync since its last synced one.
  std::atomic<bool> values_unsynced{false};
};

LevelDbTensorStore::LevelDbTensorStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LevelDbTensorStore::~LevelDbTensorStore() {
  for (auto& db : impl_->dbs) db.reset();  // before the Env, cache and filter they use
}

namespace {

absl::StatusOr<std::unique_ptr<leveldb::DB>> OpenDb(const leveldb::Options& opts,
                                                    const std::string& path) {
  leveldb::DB* db = nullptr;
  leveldb::Status s = leveldb::DB::Open(opts, path, &db);
  if (!s.ok()) {
    const std::string text = s.ToString();
    if (text.find("lock") != std::string::npos || text.find("LOCK") != std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", path,
          " is in use by another tensorkeep-server (its LevelDB lock is held): stop that "
          "server or choose another --data-dir (",
          text, ")"));
    }
    return FromLevelDb(s, absl::StrCat("opening database in ", path));
  }
  return std::unique_ptr<leveldb::DB>(db);
}

}  // namespace

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
  }
  // The index database at the root (its lock guards the directory), the values
  // database inside it. One descriptor per open table (64 MiB each): 500 cover
  // ~32 GB of values before LevelDB closes and reopens tables; with the index's
  // 200, well inside the usual limit of 1024 descriptors.
  if (options.env == nullptr) opts.max_open_files = 200;
  TK_ASSIGN_OR_RETURN(impl->dbs[kIndex], OpenDb(opts, options.path));
  const std::string values_path = options.path + "/" + kValuesSubdir;
  // An index database with keys but no values database is of an older layout
  // (or damaged): refuse it rather than create an empty values database in it.
  bool index_is_empty = true;
  {
    std::unique_ptr<leveldb::Iterator> it(impl->dbs[kIndex]->NewIterator(leveldb::ReadOptions()));
    it->SeekToFirst();
    index_is_empty = !it->Valid();
  }
  if (!index_is_empty && !opts.env->FileExists(values_path + "/CURRENT")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data directory ", options.path, " has no ", kValuesSubdir,
        "/ database: it was written by an older tensorkeep (storage format 4 or earlier) or "
        "damaged; move it aside or choose another --data-dir"));
  }
  if (options.env == nullptr) opts.max_open_files = 500;
  TK_ASSIGN_OR_RETURN(impl->dbs[kValues], OpenDb(opts, values_path));
  return std::unique_ptr<LevelDbTensorStore>(new LevelDbTensorStore(std::move(impl)));
}

std::unique_ptr<TensorStore::Batch> LevelDbTensorStore::NewBatch() {
  return std::make_unique<LevelDbBatch>();
}

absl::Status LevelDbTensorStore::Write(Batch* batch, bool sync) {
  auto* b = static_cast<LevelDbBatch*>(batch);
  leveldb::WriteOptions wo;
  wo.sync = sync;
  // Values first: a crash between the two writes leaves values nothing refers
  // to (never read), never an index entry without its value. With `sync`, the
  // values database is synced whenever it took unsynced writes, so that this
  // write being durable makes every earlier one durable, as with one log.
  if (b->used(kValues) || (sync && impl_->values_unsynced.load())) {
    if (sync) impl_->values_unsynced.store(false);
    leveldb::Status s = impl_->dbs[kValues]->Write(wo, b->batch(kValues));
    if (!s.ok()) return FromLevelDb(s, "writing to the values database");
    if (!sync) impl_->values_unsynced.store(true);
  }
  // An empty batch written with `sync` is how a caller makes earlier writes
  // durable: the index database then syncs too.
  if (!b->used(kIndex) && !sync) return absl::OkStatus();
  return FromLevelDb(impl_->dbs[kIndex]->Write(wo, b->batch(kIndex)), "writing to the database");
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
  return GetWith(impl_->dbs[DbOf(key)].get(), leveldb::ReadOptions(), key);
}

absl::StatusOr<std::optional<std::string>> LevelDbTensorStore::GetBulk(std::string_view key) {
  leveldb::ReadOptions ro;
  ro.fill_cache = false;
  return GetWith(impl_->dbs[DbOf(key)].get(), ro, key);
}

absl::Status LevelDbTensorStore::Scan(
    std::string_view prefix,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) {
  leveldb::ReadOptions ro;
  ro.fill_cache = false;
  // A prefix names a key family, so one database holds every key it matches.
  std::unique_ptr<leveldb::Iterator> it(impl_->dbs[DbOf(prefix)]->NewIterator(ro));
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
