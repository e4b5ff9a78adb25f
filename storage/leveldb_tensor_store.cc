#include "storage/leveldb_tensor_store.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "leveldb/cache.h"
#include "leveldb/db.h"
#include "leveldb/env.h"
#include "leveldb/filter_policy.h"
#include "leveldb/write_batch.h"
#include "storage/keys.h"
#include "storage/pread_env.h"
#include "storage/stored.pb.h"
#include "storage/value_log.h"

namespace tensorkeep {
namespace {

bool IsValueKey(std::string_view key) {
  return !key.empty() && static_cast<uint8_t>(key[0]) == static_cast<uint8_t>(KeyFamily::kValue);
}

class LevelDbBatch : public TensorStore::Batch {
 public:
  void Put(std::string_view key, std::string_view value) override {
    if (IsValueKey(key)) {
      values_.push_back(
          PendingValue{std::string(key), bytes_.size(), value.size(), ValueChecksum(value)});
      bytes_.append(value);
      return;
    }
    index_used_ = true;
    index_.Put(leveldb::Slice(key.data(), key.size()), leveldb::Slice(value.data(), value.size()));
  }
  void Delete(std::string_view key) override {
    index_used_ = true;
    index_.Delete(leveldb::Slice(key.data(), key.size()));
  }
  size_t ApproximateSize() const override { return index_.ApproximateSize() + bytes_.size(); }
  void Reserve(size_t value_bytes) override { bytes_.reserve(bytes_.size() + value_bytes); }

  // The values' bytes, back to back, to be appended to the value log.
  std::string_view value_bytes() const { return bytes_; }
  bool has_values() const { return !values_.empty(); }
  bool index_used() const { return index_used_; }
  // Adds to the index batch, under each value's key, where its bytes went.
  void PutValueRefs(const ValueLog::Position& at) {
    storage::ValueRef ref;
    ref.set_file(at.file);
    std::string encoded;
    for (const PendingValue& v : values_) {
      ref.set_offset(at.offset + v.offset);
      ref.set_size(v.size);
      ref.set_crc32(v.crc32);
      ref.SerializeToString(&encoded);
      index_.Put(v.key, encoded);
    }
    index_used_ = true;
  }
  leveldb::WriteBatch* index() { return &index_; }

 private:
  struct PendingValue {
    std::string key;
    size_t offset;  // in bytes_
    size_t size;
    uint32_t crc32;
  };
  leveldb::WriteBatch index_;
  bool index_used_ = false;
  std::string bytes_;
  std::vector<PendingValue> values_;
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

// "the value under key <key bytes as hex>", for messages about a value that
// cannot be read (the collector adds the tensor's name and step).
std::string DescribeValueKey(std::string_view key) {
  return absl::StrCat("the value under key ",
                      absl::BytesToHexString(absl::string_view(key.data(), key.size())));
}

}  // namespace

struct LevelDbTensorStore::Impl {
  std::unique_ptr<leveldb::Env> env;  // the pread Env, when not given one
  std::unique_ptr<leveldb::Cache> cache;
  std::unique_ptr<const leveldb::FilterPolicy> filter;
  std::unique_ptr<leveldb::DB> index;
  std::unique_ptr<ValueLog> values;
};

LevelDbTensorStore::LevelDbTensorStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LevelDbTensorStore::~LevelDbTensorStore() {
  impl_->values.reset();
  impl_->index.reset();  // before the Env, cache and filter it uses
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
    // One descriptor per open table; the value log keeps up to
    // ValueLog::kMaxOpenFiles more, well inside the usual limit of 1024.
    opts.max_open_files = 500;
  }
  // The index database at the root: its lock guards the whole directory.
  TK_ASSIGN_OR_RETURN(impl->index, OpenDb(opts, options.path));
  TK_ASSIGN_OR_RETURN(impl->values, ValueLog::Open(opts.env, options.path + "/" + kValuesSubdir,
                                                   /*sync_directory=*/options.env == nullptr,
                                                   options.value_file_bytes));
  return std::unique_ptr<LevelDbTensorStore>(new LevelDbTensorStore(std::move(impl)));
}

std::unique_ptr<TensorStore::Batch> LevelDbTensorStore::NewBatch() {
  return std::make_unique<LevelDbBatch>();
}

absl::Status LevelDbTensorStore::Write(Batch* batch, bool sync) {
  auto* b = static_cast<LevelDbBatch*>(batch);
  // Values first: a crash between the two writes leaves bytes in the value
  // log that no key refers to (never read), never a key without its value.
  if (b->has_values()) {
    TK_ASSIGN_OR_RETURN(ValueLog::Position at, impl_->values->Append(b->value_bytes()));
    b->PutValueRefs(at);
  }
  // With `sync`, every value appended so far is made durable before the index
  // write that refers to the last of them: a synced write makes every earlier
  // one durable, as with one log.
  if (sync) TK_RETURN_IF_ERROR(impl_->values->Sync());
  // An empty batch written with `sync` is how a caller makes earlier writes
  // durable: the index database then syncs too.
  if (!b->index_used() && !sync) return absl::OkStatus();
  leveldb::WriteOptions wo;
  wo.sync = sync;
  return FromLevelDb(impl_->index->Write(wo, b->index()), "writing to the database");
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

absl::StatusOr<std::string> LevelDbTensorStore::ReadValue(std::string_view key,
                                                          std::string_view encoded_ref) {
  storage::ValueRef ref;
  if (!ref.ParseFromArray(encoded_ref.data(), static_cast<int>(encoded_ref.size()))) {
    return absl::DataLossError(
        absl::StrCat("the index entry of ", DescribeValueKey(key), " is damaged"));
  }
  auto value = impl_->values->Read(ref);
  if (!value.ok()) {
    // Named only on failure: a read that succeeds builds no message.
    return absl::Status(value.status().code(),
                        absl::StrCat(DescribeValueKey(key), ": ", value.status().message()));
  }
  return value;
}

absl::StatusOr<std::optional<std::string>> LevelDbTensorStore::Get(std::string_view key) {
  TK_ASSIGN_OR_RETURN(auto entry, GetWith(impl_->index.get(), leveldb::ReadOptions(), key));
  if (!entry.has_value() || !IsValueKey(key)) return entry;
  TK_ASSIGN_OR_RETURN(std::string value, ReadValue(key, *entry));
  return std::optional<std::string>(std::move(value));
}

absl::StatusOr<std::optional<std::string>> LevelDbTensorStore::GetBulk(std::string_view key) {
  // A large value's index entry is small and goes through the block cache
  // like any other; its bytes are read from the value log, never cached here.
  if (IsValueKey(key)) return Get(key);
  leveldb::ReadOptions ro;
  ro.fill_cache = false;
  return GetWith(impl_->index.get(), ro, key);
}

absl::Status LevelDbTensorStore::Scan(
    std::string_view prefix,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) {
  leveldb::ReadOptions ro;
  ro.fill_cache = false;
  const bool values = IsValueKey(prefix);
  const std::string after_values =
      FamilyPrefix(static_cast<KeyFamily>(static_cast<uint8_t>(KeyFamily::kValue) + 1));
  std::unique_ptr<leveldb::Iterator> it(impl_->index->NewIterator(ro));
  it->Seek(leveldb::Slice(prefix.data(), prefix.size()));
  while (it->Valid()) {
    const leveldb::Slice k = it->key();
    std::string_view key(k.data(), k.size());
    if (key.substr(0, prefix.size()) != prefix) break;
    const leveldb::Slice v = it->value();
    if (values) {
      TK_ASSIGN_OR_RETURN(std::string value, ReadValue(key, std::string_view(v.data(), v.size())));
      if (!fn(key, value)) break;
    } else if (IsValueKey(key)) {
      // The empty prefix visits every key but large values: skip them all.
      it->Seek(after_values);
      continue;
    } else if (!fn(key, std::string_view(v.data(), v.size()))) {
      break;
    }
    it->Next();
  }
  return FromLevelDb(it->status(), "scanning the database");
}

}  // namespace tensorkeep
