#include "storage/leveldb_tensor_store.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "leveldb/cache.h"
#include "leveldb/db.h"
#include "leveldb/env.h"
#include "leveldb/filter_policy.h"
#include "leveldb/write_batch.h"
#include "storage/disk_reserve.h"
#include "storage/keys.h"
#include "storage/leveldb_tensor_store_impl.h"
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
  // The values of one value-log lane (one trial: ValueLog's lanes), to be
  // appended together.
  struct Lane {
    std::string key;  // the trial
    // The values, back to back: values given up (PutOwned) each a piece as
    // it came, values copied (Put) joined into pieces of their own.
    std::vector<std::string> pieces;
    size_t size = 0;          // bytes of `pieces`
    bool copy_tail = false;   // the last piece is one Put copies into
    struct Value {
      std::string key;
      size_t offset;  // in bytes
      size_t size;
      uint32_t crc32;
    };
    std::vector<Value> values;
  };

  void Put(std::string_view key, std::string_view value) override {
    if (IsValueKey(key)) {
      Lane& lane = LaneOf(ValueKeyTrial(key));
      AddValue(&lane, key, value);
      if (!lane.copy_tail) {
        lane.pieces.emplace_back();
        lane.copy_tail = true;
      }
      lane.pieces.back().append(value);
      return;
    }
    index_used_ = true;
    index_.Put(leveldb::Slice(key.data(), key.size()), leveldb::Slice(value.data(), value.size()));
  }
  void PutOwned(std::string_view key, std::string&& value) override {
    if (!IsValueKey(key)) return Put(key, value);
    Lane& lane = LaneOf(ValueKeyTrial(key));
    AddValue(&lane, key, value);
    lane.pieces.push_back(std::move(value));
    lane.copy_tail = false;
  }
  void Delete(std::string_view key) override {
    index_used_ = true;
    index_.Delete(leveldb::Slice(key.data(), key.size()));
    if (IsValueKey(key)) deleted_values_.emplace_back(key);
  }
  size_t ApproximateSize() const override { return index_.ApproximateSize() + value_bytes_; }

  // The values to append to the value log, by lane.
  std::vector<Lane>& lanes() { return lanes_; }
  bool index_used() const { return index_used_; }
  // Adds to the index batch, under each of `lane`'s values' keys, where its
  // bytes went.
  void PutValueRefs(const Lane& lane, const ValueLog::Position& at) {
    storage::ValueRef ref;
    ref.set_file(at.file);
    std::string encoded;
    for (const Lane::Value& v : lane.values) {
      ref.set_offset(at.offset + v.offset);
      ref.set_size(v.size);
      ref.set_crc32(v.crc32);
      ref.SerializeToString(&encoded);
      index_.Put(v.key, encoded);
    }
    index_used_ = true;
  }
  leveldb::WriteBatch* index() { return &index_; }
  // Large values' keys deleted: their bytes become garbage.
  const std::vector<std::string>& deleted_values() const { return deleted_values_; }

 private:
  void AddValue(Lane* lane, std::string_view key, std::string_view value) {
    lane->values.push_back(
        Lane::Value{std::string(key), lane->size, value.size(), ValueChecksum(value)});
    lane->size += value.size();
    value_bytes_ += value.size();
  }
  Lane& LaneOf(std::string_view trial) {
    for (Lane& lane : lanes_) {
      if (lane.key == trial) return lane;
    }
    Lane& lane = lanes_.emplace_back();
    lane.key.assign(trial.data(), trial.size());
    return lane;
  }

  leveldb::WriteBatch index_;
  bool index_used_ = false;
  size_t value_bytes_ = 0;
  std::vector<Lane> lanes_;
  std::vector<std::string> deleted_values_;
};

}  // namespace

absl::Status FromLevelDb(const leveldb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat(what, ": ", s.ToString()));
  if (s.IsCorruption()) return absl::DataLossError(absl::StrCat(what, ": ", s.ToString()));
  if (s.IsInvalidArgument()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.ToString()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

std::string DescribeValueKey(std::string_view key) {
  return absl::StrCat("the value under key ",
                      absl::BytesToHexString(absl::string_view(key.data(), key.size())));
}

absl::Status Reopening() {
  return absl::UnavailableError(
      "the collector's storage is being reopened after a failed write; try again shortly");
}

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
    absl::Status status = FromLevelDb(s, absl::StrCat("opening database in ", path));
    if (text.find("No space left") != std::string::npos) {
      return absl::ResourceExhaustedError(absl::StrCat(
          status.message(), ": the filesystem of ", path,
          " is full; opening the database writes its log out as a table, so free some space "
          "there (or move the data directory to a larger disk) and start again"));
    }
    return status;
  }
  return std::unique_ptr<leveldb::DB>(db);
}

// Free bytes for an unprivileged writer on the filesystem holding `path`
// (std::nullopt when unknown).
std::optional<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
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
  impl->options = options;
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
  if (options.env == nullptr && options.start_reserve_bytes > 0) {
    impl->reserve = std::make_unique<DiskReserve>(options.path, options.start_reserve_bytes);
  }
  // The index database at the root: its lock guards the whole directory.
  impl->db_options = opts;
  auto db = OpenDb(opts, options.path);
  if (absl::IsResourceExhausted(db.status()) && impl->reserve != nullptr &&
      impl->reserve->Release()) {
    impl->open_note = absl::StrCat(
        "the filesystem of ", options.path, " is full: released the ",
        options.start_reserve_bytes >> 20, " MiB disk reserve (", impl->reserve->path(),
        ") to start; new data is refused until space is freed there, queries go on");
    impl->reserve_released = true;
    db = OpenDb(opts, options.path);
    if (!db.ok()) {
      return absl::Status(db.status().code(),
                          absl::StrCat(db.status().message(), " (even after releasing the ",
                                       options.start_reserve_bytes >> 20, " MiB disk reserve)"));
    }
  }
  if (!db.ok()) return db.status();
  impl->index = std::move(*db);
  TK_ASSIGN_OR_RETURN(impl->values, ValueLog::Open(opts.env, options.path + "/" + kValuesSubdir,
                                                   /*sync_directory=*/options.env == nullptr,
                                                   options.value_file_bytes,
                                                   options.value_lanes));
  {
    absl::MutexLock lock(&impl->write_mu);
    const std::string prefix = FamilyPrefix(KeyFamily::kValueGarbage);
    std::unique_ptr<leveldb::Iterator> it(impl->index->NewIterator(leveldb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      KeyReader r(std::string_view(it->key().data(), it->key().size()));
      KeyFamily f;
      uint64_t file = 0;
      storage::ValueGarbage g;
      if (!r.Family(&f) || !r.U64(&file) ||
          !g.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
        return absl::DataLossError(
            absl::StrCat("a value-garbage entry of the database in ", options.path, " is damaged"));
      }
      impl->garbage[file] = g.bytes();
    }
  }
  auto store = std::unique_ptr<LevelDbTensorStore>(new LevelDbTensorStore(std::move(impl)));
  {
    absl::MutexLock lock(&store->impl_->write_mu);
    store->TakeReserveIfRoom(0);
  }
  return store;
}

std::unique_ptr<TensorStore::Batch> LevelDbTensorStore::NewBatch() {
  return std::make_unique<LevelDbBatch>();
}

absl::Status LevelDbTensorStore::Write(Batch* batch, bool sync) { return WriteAll({batch}, sync); }

absl::Status LevelDbTensorStore::RepairAfterFailure() {
  const auto now = std::chrono::steady_clock::now();
  const auto refused = [&](absl::string_view why) {
    return absl::UnavailableError(
        absl::StrCat("the collector's storage refuses writes after a failed one (",
                     impl_->failed.message(), ")", why.empty() ? "" : ": ", why));
  };
  if (now < impl_->next_reopen) return refused("");
  impl_->next_reopen =
      now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(impl_->options.reopen_interval_seconds));
  {
    const std::optional<uint64_t> free = MeasureFreeBytes();
    if (free.has_value() && *free < impl_->options.reopen_min_free_bytes) {
      return refused(absl::StrCat("only ", *free >> 20, " MiB are free on the filesystem of ",
                                  impl_->options.path, "; writing resumes once ",
                                  impl_->options.reopen_min_free_bytes >> 20, " MiB are free"));
    }
  }
  absl::MutexLock lock(&impl_->db_mu);
  // Close first: LevelDB's lock on the directory allows one open handle.
  impl_->index.reset();
  auto db = OpenDb(impl_->db_options, impl_->options.path);
  if (!db.ok())
    return refused(absl::StrCat("reopening the database failed: ", db.status().message()));
  impl_->index = std::move(*db);
  impl_->failed = absl::OkStatus();
  return absl::OkStatus();
}

const std::string& LevelDbTensorStore::open_note() const { return impl_->open_note; }

void LevelDbTensorStore::TakeReserveIfRoom(uint64_t bytes) {
  DiskReserve* reserve = impl_->reserve.get();
  if (reserve == nullptr || impl_->reserve_held) return;
  if (reserve->Held()) {
    impl_->reserve_held = true;
    return;
  }
  const std::optional<uint64_t> free = MeasureFreeBytes();
  if (!free.has_value() ||
      *free < reserve->bytes() + impl_->options.min_free_bytes + bytes) {
    return;  // not now: the disk guard's margin comes first
  }
  impl_->reserve_held = reserve->Take().ok();
  if (impl_->reserve_held) impl_->reserve_released = false;
}

std::optional<uint64_t> LevelDbTensorStore::MeasureFreeBytes() const {
  if (impl_->options.free_bytes) return impl_->options.free_bytes();
  if (impl_->options.env == nullptr) return FreeBytes(impl_->options.path);
  return std::nullopt;  // an in-memory or test Env: unknown
}

absl::Status LevelDbTensorStore::CheckFreeSpace(uint64_t bytes) {
  const uint64_t keep = impl_->options.min_free_bytes;
  if (keep == 0) return absl::OkStatus();
  // statvfs at most every 100 ms, and before any refusal (so writing resumes
  // as soon as space is back); in between, what was written is subtracted.
  const auto now = std::chrono::steady_clock::now();
  if (now >= impl_->next_free_check || impl_->free_estimate < keep + bytes) {
    TakeReserveIfRoom(bytes);  // back once there is room for it
    const std::optional<uint64_t> free = MeasureFreeBytes();
    if (!free.has_value()) return absl::OkStatus();  // unknown: no guard
    impl_->free_estimate = *free;
    impl_->next_free_check = now + std::chrono::milliseconds(100);
  }
  // A reserve released to start on a full disk comes back before new data.
  const uint64_t owed = impl_->reserve_released ? impl_->reserve->bytes() : 0;
  if (impl_->free_estimate < keep + owed + bytes) {
    return MakeError(
        Reason::kStorageFull,
        absl::StrCat(
            "the collector's data directory ", impl_->options.path, " has ",
            impl_->free_estimate >> 20, " MiB free, and it keeps ", keep >> 20,
            " MiB free (--min-free-disk-mb)",
            owed == 0 ? ""
                      : absl::StrCat(" besides its ", owed >> 20,
                                     " MiB disk reserve, released to start on a full disk"),
            ": new data is refused until space is freed there; queries go on, and writers "
            "resend by themselves"));
  }
  impl_->free_estimate -= bytes;
  return absl::OkStatus();
}

absl::Status LevelDbTensorStore::WriteAll(const std::vector<Batch*>& batches, bool sync) {
  absl::MutexLock lock(&impl_->write_mu);
  if (!impl_->failed.ok()) TK_RETURN_IF_ERROR(RepairAfterFailure());
  uint64_t bytes = 0;
  for (Batch* batch : batches) bytes += batch->ApproximateSize();
  TK_RETURN_IF_ERROR(CheckFreeSpace(bytes));
  // Values first: a crash between the two writes leaves bytes in the value
  // log that no key refers to (never read), never a key without its value.
  bool index_used = false;
  for (Batch* batch : batches) {
    auto* b = static_cast<LevelDbBatch*>(batch);
    for (const LevelDbBatch::Lane& lane : b->lanes()) {
      // Each trial's values to a file of its own (ValueLog's lanes).
      TK_ASSIGN_OR_RETURN(ValueLog::Position at, impl_->values->Append(lane.pieces, lane.key));
      b->PutValueRefs(lane, at);
    }
    index_used = index_used || b->index_used();
  }
  // With `sync`, every value appended so far is made durable before the index
  // write that refers to the last of them: a synced write makes every earlier
  // one durable, as with one log.
  if (sync) TK_RETURN_IF_ERROR(impl_->values->Sync());
  // An empty batch written with `sync` is how a caller makes earlier writes
  // durable: the index database then syncs too.
  if (!index_used && !sync) return absl::OkStatus();
  leveldb::WriteBatch merged;
  leveldb::WriteBatch* index =
      batches.empty() ? &merged : static_cast<LevelDbBatch*>(batches[0])->index();
  if (batches.size() > 1) {
    for (Batch* batch : batches) merged.Append(*static_cast<LevelDbBatch*>(batch)->index());
    index = &merged;
  }
  std::map<uint64_t, uint64_t> garbage = CountDeletedValues(batches, index);
  leveldb::WriteOptions wo;
  wo.sync = sync;
  const leveldb::Status s = impl_->index->Write(wo, index);
  if (!s.ok()) {
    impl_->failed = FromLevelDb(s, "writing to the database");
    impl_->next_reopen = std::chrono::steady_clock::time_point();
    return impl_->failed;
  }
  for (const auto& [file, bytes] : garbage) impl_->garbage[file] = bytes;
  return absl::OkStatus();
}

std::map<uint64_t, uint64_t> LevelDbTensorStore::CountDeletedValues(
    const std::vector<Batch*>& batches, void* index_batch) {
  std::map<uint64_t, uint64_t> totals;
  std::set<std::string_view> seen;
  for (Batch* batch : batches) {
    for (const std::string& key : static_cast<LevelDbBatch*>(batch)->deleted_values()) {
      if (!seen.insert(key).second) continue;
      // The writer reads the index without db_mu (only it changes the handle).
      std::string entry;
      if (!impl_->index->Get(leveldb::ReadOptions(), key, &entry).ok()) continue;
      storage::ValueRef ref;
      if (!ref.ParseFromString(entry)) continue;
      auto it = totals.find(ref.file());
      if (it == totals.end()) {
        auto known = impl_->garbage.find(ref.file());
        it = totals.emplace(ref.file(), known == impl_->garbage.end() ? 0 : known->second).first;
      }
      it->second += ref.size();
    }
  }
  auto* index = static_cast<leveldb::WriteBatch*>(index_batch);
  storage::ValueGarbage g;
  for (const auto& [file, bytes] : totals) {
    g.set_bytes(bytes);
    index->Put(ValueGarbageKey(file), g.SerializeAsString());
  }
  return totals;
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
    // ReclaimValueSpace may have moved the value (and removed its file) since
    // the entry was read: read it where the entry points now.
    // (Callers hold db_mu shared.)
    auto now = GetWith(impl_->index.get(), leveldb::ReadOptions(), key);
    if (now.ok() && now->has_value() && **now != encoded_ref) {
      storage::ValueRef moved;
      if (moved.ParseFromString(**now)) value = impl_->values->Read(moved);
    }
  }
  if (!value.ok()) {
    // Named only on failure: a read that succeeds builds no message.
    return absl::Status(value.status().code(),
                        absl::StrCat(DescribeValueKey(key), ": ", value.status().message()));
  }
  return value;
}

absl::StatusOr<std::optional<std::string>> LevelDbTensorStore::GetEntry(std::string_view key) {
  absl::ReaderMutexLock lock(&impl_->db_mu);
  if (impl_->index == nullptr) return absl::UnavailableError("the store is being reopened");
  return GetWith(impl_->index.get(), leveldb::ReadOptions(), key);
}


absl::StatusOr<std::optional<std::string>> LevelDbTensorStore::Get(std::string_view key) {
  absl::ReaderMutexLock lock(&impl_->db_mu);
  if (impl_->index == nullptr) return Reopening();
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
  absl::ReaderMutexLock lock(&impl_->db_mu);
  if (impl_->index == nullptr) return Reopening();
  return GetWith(impl_->index.get(), ro, key);
}

namespace {

class ValueLogBulkReader : public TensorStore::BulkReader {
 public:
  ValueLogBulkReader(std::unique_ptr<ValueLog::Cursor> cursor, std::string what)
      : cursor_(std::move(cursor)), what_(std::move(what)) {}
  uint64_t size() const override { return cursor_->size(); }
  uint64_t remaining() const override { return cursor_->remaining(); }
  std::optional<uint32_t> checksum() const override { return cursor_->checksum(); }
  absl::Status Read(size_t max_bytes, std::string* out) override {
    absl::Status s = cursor_->Read(max_bytes, out);
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat(what_, ": ", s.message()));
  }

 private:
  std::unique_ptr<ValueLog::Cursor> cursor_;
  std::string what_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TensorStore::BulkReader>> LevelDbTensorStore::OpenBulk(
    std::string_view key) {
  if (!IsValueKey(key)) return TensorStore::OpenBulk(key);
  std::optional<std::string> entry;
  {
    absl::ReaderMutexLock lock(&impl_->db_mu);
    if (impl_->index == nullptr) return Reopening();
    TK_ASSIGN_OR_RETURN(entry, GetWith(impl_->index.get(), leveldb::ReadOptions(), key));
  }
  if (!entry.has_value()) return std::unique_ptr<BulkReader>();
  storage::ValueRef ref;
  if (!ref.ParseFromArray(entry->data(), static_cast<int>(entry->size()))) {
    return absl::DataLossError(
        absl::StrCat("the index entry of ", DescribeValueKey(key), " is damaged"));
  }
  auto cursor = impl_->values->OpenCursor(ref);
  if (!cursor.ok()) {
    // Moved meanwhile (see ReadValue): open it where the entry points now.
    auto now = GetEntry(key);
    if (now.ok() && now->has_value() && **now != *entry && ref.ParseFromString(**now)) {
      cursor = impl_->values->OpenCursor(ref);
    }
  }
  if (!cursor.ok()) {
    return absl::Status(cursor.status().code(),
                        absl::StrCat(DescribeValueKey(key), ": ", cursor.status().message()));
  }
  return std::unique_ptr<BulkReader>(
      new ValueLogBulkReader(*std::move(cursor), DescribeValueKey(key)));
}

absl::Status LevelDbTensorStore::Scan(
    std::string_view prefix,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) {
  leveldb::ReadOptions ro;
  ro.fill_cache = false;
  const bool values = IsValueKey(prefix);
  const std::string after_values =
      FamilyPrefix(static_cast<KeyFamily>(static_cast<uint8_t>(KeyFamily::kValue) + 1));
  absl::ReaderMutexLock lock(&impl_->db_mu);
  if (impl_->index == nullptr) return Reopening();
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

absl::Status LevelDbTensorStore::ScanKeys(std::string_view prefix, std::string_view from,
                                          const std::function<bool(std::string_view key, size_t entry_bytes)>& fn) {
  leveldb::ReadOptions ro;
  ro.fill_cache = false;
  absl::ReaderMutexLock lock(&impl_->db_mu);
  if (impl_->index == nullptr) return Reopening();
  std::unique_ptr<leveldb::Iterator> it(impl_->index->NewIterator(ro));
  const std::string_view start = from > prefix ? from : prefix;
  for (it->Seek(leveldb::Slice(start.data(), start.size())); it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (key.substr(0, prefix.size()) != prefix) break;
    if (!fn(key, it->value().size())) break;
  }
  return FromLevelDb(it->status(), "scanning the database");
}

absl::Status LevelDbTensorStore::Compact(std::string_view begin, std::string_view end) {
  absl::ReaderMutexLock lock(&impl_->db_mu);
  if (impl_->index == nullptr) return Reopening();
  const leveldb::Slice b(begin.data(), begin.size()), e(end.data(), end.size());
  impl_->index->CompactRange(&b, &e);
  return absl::OkStatus();
}

absl::Status LevelDbTensorStore::Fault(std::string_view stage) const {
  if (!impl_->options.fault_point) return absl::OkStatus();
  return impl_->options.fault_point(stage);
}

}  // namespace tensorkeep
