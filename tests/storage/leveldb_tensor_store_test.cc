#include "storage/leveldb_tensor_store.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.h"
#include "gtest/gtest.h"
#include "leveldb/db.h"
#include "leveldb/env.h"
#include "leveldb/helpers/memenv.h"
#include "storage/keys.h"
#include "storage/stored.pb.h"

namespace tensorkeep {
namespace {

class LevelDbTensorStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { env_.reset(leveldb::NewMemEnv(leveldb::Env::Default())); }
  std::unique_ptr<LevelDbTensorStore> Open(uint64_t min_free_bytes = 0,
                                           std::function<std::optional<uint64_t>()> free = {}) {
    LevelDbOptions o;
    o.path = "/db";
    o.env = env_.get();
    o.min_free_bytes = min_free_bytes;
    o.free_bytes = std::move(free);
    auto s = LevelDbTensorStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(*s);
  }
  std::unique_ptr<leveldb::Env> env_;
};

TEST_F(LevelDbTensorStoreTest, BatchIsVisibleAfterWriteAndSurvivesReopen) {
  {
    auto store = Open();
    auto batch = store->NewBatch();
    batch->Put("a1", "one");
    batch->Put("a2", "two");
    batch->Put("b1", "other");
    ASSERT_TRUE(store->Write(batch.get(), false).ok());
  }
  auto store = Open();
  // A plain read and a bulk read (not cached) see the same.
  using Read = absl::StatusOr<std::optional<std::string>> (TensorStore::*)(std::string_view);
  for (Read read :
       {static_cast<Read>(&TensorStore::Get), static_cast<Read>(&TensorStore::GetBulk)}) {
    auto v = (store.get()->*read)("a2");
    ASSERT_TRUE(v.ok());
    ASSERT_TRUE(v->has_value());
    EXPECT_EQ(**v, "two");
    auto missing = (store.get()->*read)("zz");
    ASSERT_TRUE(missing.ok());
    EXPECT_FALSE(missing->has_value());
  }
}

TEST_F(LevelDbTensorStoreTest, ScanVisitsOnlyThePrefixInOrder) {
  auto store = Open();
  auto batch = store->NewBatch();
  for (const char* k : {"b", "a3", "a1", "a2", "c"}) batch->Put(k, k);
  ASSERT_TRUE(store->Write(batch.get(), true).ok());
  std::string seen;
  ASSERT_TRUE(store
                  ->Scan("a",
                         [&](std::string_view k, std::string_view v) {
                           EXPECT_EQ(k, v);
                           seen += std::string(k) + ",";
                           return true;
                         })
                  .ok());
  EXPECT_EQ(seen, "a1,a2,a3,");
}

TEST_F(LevelDbTensorStoreTest, ScanStopsWhenTheCallbackSaysSo) {
  auto store = Open();
  auto batch = store->NewBatch();
  for (const char* k : {"a1", "a2", "a3"}) batch->Put(k, "");
  ASSERT_TRUE(store->Write(batch.get(), false).ok());
  int n = 0;
  ASSERT_TRUE(store->Scan("a", [&](std::string_view, std::string_view) { return ++n < 2; }).ok());
  EXPECT_EQ(n, 2);
}

// The value log's files (NNNNNN.vlog), in order.
std::vector<std::string> ValueFiles(leveldb::Env* env) {
  std::vector<std::string> children, files;
  env->GetChildren(std::string("/db/") + kValuesSubdir, &children);
  for (const auto& f : children) {
    if (f.size() > 5 && f.compare(f.size() - 5, 5, ".vlog") == 0) files.push_back(f);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadWholeFile(leveldb::Env* env, const std::string& name) {
  std::string out;
  EXPECT_TRUE(leveldb::ReadFileToString(env, name, &out).ok()) << name;
  return out;
}

TEST_F(LevelDbTensorStoreTest, LargeValuesGoToTheValueLogAndReadBackAfterReopen) {
  const std::string value_key = ValueKey("t", 3, "w", 7, "x");
  const std::string block_key = BlockKey("t", 3, "w", 7);
  std::string value(5000, 'v');
  value[17] = 'q';
  {
    auto store = Open();
    auto batch = store->NewBatch();
    batch->Put(block_key, "block");
    batch->Put(value_key, value);
    batch->Put(TrialKey("t"), "trial");
    ASSERT_TRUE(store->Write(batch.get(), true).ok());
  }
  // The bytes are in the value log, once; the index holds only where they are.
  const auto files = ValueFiles(env_.get());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(ReadWholeFile(env_.get(), std::string("/db/") + kValuesSubdir + "/" + files[0]), value);
  auto store = Open();
  for (auto v : {store->Get(value_key), store->GetBulk(value_key)}) {
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    EXPECT_EQ(**v, value);
  }
  auto b = store->Get(block_key);
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ(**b, "block");
  // A scan of the value family yields values; the empty prefix every key but them.
  std::vector<std::pair<std::string, std::string>> values;
  std::vector<std::string> all;
  ASSERT_TRUE(store
                  ->Scan(FamilyPrefix(KeyFamily::kValue),
                         [&](std::string_view k, std::string_view v) {
                           values.emplace_back(k, v);
                           return true;
                         })
                  .ok());
  ASSERT_TRUE(store
                  ->Scan("",
                         [&](std::string_view k, std::string_view) {
                           all.emplace_back(k);
                           return true;
                         })
                  .ok());
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0].first, value_key);
  EXPECT_EQ(values[0].second, value);
  EXPECT_EQ(all, std::vector<std::string>({TrialKey("t"), block_key}));
}

// Values given up (PutOwned) and copied (Put) mix in one batch and one lane:
// the value file holds them back to back in the order they were put, each
// key finds its own bytes, and another trial's lane goes to a file of its own.
TEST_F(LevelDbTensorStoreTest, ValuesGivenUpAndCopiedInOneBatchLieInTheOrderPut) {
  auto pattern = [](size_t n, int seed) {
    std::string v(n, '\0');
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 17) % 251);
    return v;
  };
  const std::vector<std::pair<std::string, std::string>> t = {
      {ValueKey("t", 5, "w", 9, "a"), pattern(3000, 1)},    // copied
      {ValueKey("t", 5, "w", 9, "b"), pattern(200000, 2)},  // given up
      {ValueKey("t", 5, "w", 9, "c"), pattern(4000, 3)},    // copied
      {ValueKey("t", 5, "w", 9, "d"), pattern(5000, 4)},    // copied, joined to the one before
      {ValueKey("t", 5, "w", 9, "e"), pattern(70000, 5)},   // given up
  };
  const std::string other = ValueKey("u", 5, "w", 9, "a");
  const std::string other_value = pattern(90000, 6);
  {
    auto store = Open();
    auto batch = store->NewBatch();
    for (size_t i = 0; i < t.size(); ++i) {
      if (i == 1 || i == 4) {
        batch->PutOwned(t[i].first, std::string(t[i].second));
      } else {
        batch->Put(t[i].first, t[i].second);
      }
    }
    batch->PutOwned(other, std::string(other_value));
    EXPECT_GE(batch->ApproximateSize(), 3000u + 200000 + 4000 + 5000 + 70000 + 90000);
    ASSERT_TRUE(store->Write(batch.get(), true).ok());
  }
  std::string joined;
  for (const auto& [k, v] : t) joined += v;
  const auto files = ValueFiles(env_.get());
  ASSERT_EQ(files.size(), 2u);
  const std::string dir = std::string("/db/") + kValuesSubdir + "/";
  EXPECT_TRUE(ReadWholeFile(env_.get(), dir + files[0]) == joined ||
              ReadWholeFile(env_.get(), dir + files[1]) == joined);
  auto store = Open();
  for (const auto& [k, v] : t) {
    for (auto got : {store->Get(k), store->GetBulk(k)}) {
      ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
      EXPECT_TRUE(**got == v) << k;
    }
  }
  auto got = store->Get(other);
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_TRUE(**got == other_value);
}

TEST_F(LevelDbTensorStoreTest, OpeningCreatesNoValueFileAndEachOpenWritesANewOne) {
  auto put = [&](LevelDbTensorStore* store, int i) {
    auto batch = store->NewBatch();
    batch->Put(ValueKey("t", i, "w", i + 1, "x"),
               std::string(3000 + i, static_cast<char>('a' + i)));
    ASSERT_TRUE(store->Write(batch.get(), false).ok());
  };
  { auto store = Open(); }
  EXPECT_TRUE(ValueFiles(env_.get()).empty());
  for (int i = 0; i < 3; ++i) {
    auto store = Open();
    put(store.get(), 2 * i);
    put(store.get(), 2 * i + 1);
  }
  // A crash may leave a torn tail in the last file: nothing is appended after it.
  EXPECT_EQ(ValueFiles(env_.get()),
            std::vector<std::string>({"000001.vlog", "000002.vlog", "000003.vlog"}));
  auto store = Open();
  for (int i = 0; i < 6; ++i) {
    auto v = store->Get(ValueKey("t", i, "w", i + 1, "x"));
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    EXPECT_EQ(**v, std::string(3000 + i, static_cast<char>('a' + i)));
  }
}

TEST_F(LevelDbTensorStoreTest, ADamagedOrTruncatedValueFileIsDataLossNamingTheFile) {
  const std::string first = ValueKey("t", 0, "w", 1, "x");
  const std::string second = ValueKey("t", 1, "w", 2, "x");
  {
    auto store = Open();
    for (const auto& key : {first, second}) {
      auto batch = store->NewBatch();
      batch->Put(key, std::string(4096, 'z'));
      ASSERT_TRUE(store->Write(batch.get(), false).ok());
    }
  }
  const std::string file = std::string("/db/") + kValuesSubdir + "/000001.vlog";
  std::string bytes = ReadWholeFile(env_.get(), file);
  ASSERT_EQ(bytes.size(), 8192u);
  bytes[100] ^= 1;     // one bit of the first value
  bytes.resize(6000);  // and the second one cut short
  ASSERT_TRUE(leveldb::WriteStringToFile(env_.get(), bytes, file).ok());
  // Index entries that point past the end of the file or do not parse.
  const std::string huge = ValueKey("t", 2, "w", 3, "x");
  const std::string garbage = ValueKey("t", 3, "w", 4, "x");
  {
    leveldb::Options o;
    o.env = env_.get();
    leveldb::DB* raw = nullptr;
    ASSERT_TRUE(leveldb::DB::Open(o, "/db", &raw).ok());
    std::unique_ptr<leveldb::DB> index(raw);
    storage::ValueRef ref;
    ref.set_file(1);
    ref.set_size(uint64_t{1} << 40);
    ASSERT_TRUE(index->Put(leveldb::WriteOptions(), huge, ref.SerializeAsString()).ok());
    ASSERT_TRUE(index->Put(leveldb::WriteOptions(), garbage, "\xff\xff\xff").ok());
  }
  auto store = Open();
  auto too_large = store->Get(huge);
  EXPECT_EQ(too_large.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(too_large.status().message().find("truncated"), std::string::npos)
      << too_large.status();
  auto unparsed = store->Get(garbage);
  EXPECT_EQ(unparsed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(unparsed.status().message().find("damaged"), std::string::npos) << unparsed.status();
  auto damaged = store->Get(first);
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(damaged.status().message().find("checksum"), std::string::npos) << damaged.status();
  EXPECT_NE(damaged.status().message().find("000001.vlog"), std::string::npos) << damaged.status();
  auto cut = store->GetBulk(second);
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status();
  // The index is intact: the rest of the store reads on.
  auto batch = store->NewBatch();
  batch->Put(TrialKey("t"), "still writable");
  ASSERT_TRUE(store->Write(batch.get(), false).ok());
  EXPECT_EQ(**store->Get(TrialKey("t")), "still writable");
}

TEST_F(LevelDbTensorStoreTest, TheDiskGuardRefusesWritesBelowTheFloorAndResumesWhenSpaceIsBack) {
  std::atomic<uint64_t> free{uint64_t{3} << 20};
  std::atomic<int> measured{0};
  auto store = Open(uint64_t{1} << 20, [&]() -> std::optional<uint64_t> {
    ++measured;
    return free.load();
  });
  const auto write = [&](const std::string& key, size_t bytes) {
    auto batch = store->NewBatch();
    batch->Put(key, std::string(bytes, 'v'));
    return store->Write(batch.get(), false);
  };
  ASSERT_TRUE(write("a", 1 << 20).ok()) << "3 MiB free, 1 MiB kept: room for 2";
  EXPECT_EQ(measured.load(), 1);
  // Within 100 ms the guard subtracts what it wrote instead of measuring.
  ASSERT_TRUE(write("c", 512 << 10).ok());
  EXPECT_EQ(measured.load(), 1);
  // Someone else fills the disk: a write that its estimate says would pass
  // the floor is decided by a fresh measurement, and refused.
  free = uint64_t{1200} << 10;
  absl::Status refused = write("b", 1536 << 10);
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_EQ(GetReason(refused), Reason::kStorageFull);
  EXPECT_NE(refused.message().find("/db"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("keeps 1 MiB free"), std::string::npos) << refused;
  EXPECT_EQ(measured.load(), 2) << "a refusal goes by a fresh measurement";
  // Nothing of the refused write is there; reads go on.
  EXPECT_FALSE(store->Get("b")->has_value());
  EXPECT_EQ(store->Get("a")->value(), std::string(1 << 20, 'v'));
  // Space comes back: the next write goes through, with no reopen.
  free = uint64_t{100} << 20;
  EXPECT_TRUE(write("b", 1536 << 10).ok());
  EXPECT_EQ(store->Get("b")->value().size(), 1536u << 10);
}

// Reads `key` with OpenBulk in pieces of `piece` bytes; the status of the
// first failing read (or OK) and the bytes read before it.
absl::Status ReadInPieces(TensorStore* store, const std::string& key, size_t piece,
                          std::string* got, int* reads) {
  auto reader = store->OpenBulk(key);
  if (!reader.ok()) return reader.status();
  if (*reader == nullptr) return absl::NotFoundError("absent");
  got->clear();
  *reads = 0;
  std::string out;
  while ((*reader)->remaining() > 0 && *reads < 1000) {
    const uint64_t before = (*reader)->remaining();
    absl::Status s = (*reader)->Read(piece, &out);
    ++*reads;
    if (!s.ok()) return s;
    if ((*reader)->remaining() != before - out.size() || out.empty()) {
      return absl::InternalError("remaining() did not go down by the piece read");
    }
    got->append(out);
  }
  return absl::OkStatus();
}

TEST_F(LevelDbTensorStoreTest, OpenBulkReadsAValueInPiecesAndChecksItsChecksumAtTheEnd) {
  const std::string first = ValueKey("t", 0, "w", 1, "x");
  const std::string second = ValueKey("t", 1, "w", 2, "x");
  std::string value(10000, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 7 + i / 251);
  {
    auto store = Open();
    for (const auto& key : {first, second}) {
      auto batch = store->NewBatch();
      batch->Put(key, value);
      ASSERT_TRUE(store->Write(batch.get(), false).ok());
    }
    std::string got;
    int reads = 0;
    ASSERT_TRUE(ReadInPieces(store.get(), first, 3000, &got, &reads).ok());
    EXPECT_EQ(got, value);
    EXPECT_EQ(reads, 4);  // 3000 + 3000 + 3000 + 1000
    // A small entry (not in the value log) and an absent key.
    auto batch = store->NewBatch();
    batch->Put(TrialKey("t"), "meta");
    ASSERT_TRUE(store->Write(batch.get(), false).ok());
    ASSERT_TRUE(ReadInPieces(store.get(), TrialKey("t"), 3, &got, &reads).ok());
    EXPECT_EQ(got, "meta");
    auto absent = store->OpenBulk(ValueKey("t", 9, "w", 9, "x"));
    ASSERT_TRUE(absent.ok());
    EXPECT_EQ(*absent, nullptr);
  }
  const std::string file = std::string("/db/") + kValuesSubdir + "/000001.vlog";
  std::string bytes = ReadWholeFile(env_.get(), file);
  ASSERT_EQ(bytes.size(), 20000u);
  bytes[5000] ^= 1;     // one bit in the middle of the first value
  bytes.resize(17000);  // and the second one cut short
  ASSERT_TRUE(leveldb::WriteStringToFile(env_.get(), bytes, file).ok());
  auto store = Open();
  std::string got;
  int reads = 0;
  absl::Status damaged = ReadInPieces(store.get(), first, 3000, &got, &reads);
  EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss) << damaged;
  EXPECT_NE(damaged.message().find("checksum"), std::string::npos) << damaged;
  EXPECT_EQ(reads, 4) << "the damage is found by the read of the last piece";
  absl::Status cut = ReadInPieces(store.get(), second, 3000, &got, &reads);
  EXPECT_EQ(cut.code(), absl::StatusCode::kDataLoss) << cut;
  EXPECT_NE(cut.message().find("truncated"), std::string::npos) << cut;
  EXPECT_NE(cut.message().find("000001.vlog"), std::string::npos) << cut;
  EXPECT_EQ(got, value.substr(0, 6000)) << "the pieces before the cut were read";
}

// Wraps the value log's files: counts their Sync() calls and fails the next
// Append when told to.
class ValueFileEnv : public leveldb::EnvWrapper {
 public:
  explicit ValueFileEnv(leveldb::Env* base) : EnvWrapper(base) {}
  leveldb::Status NewWritableFile(const std::string& f, leveldb::WritableFile** r) override {
    leveldb::Status s = target()->NewWritableFile(f, r);
    if (s.ok() && f.size() > 5 && f.compare(f.size() - 5, 5, ".vlog") == 0) *r = new File(*r, this);
    return s;
  }
  std::atomic<bool> fail_next_append{false};
  std::atomic<int> syncs{0};

 private:
  class File : public leveldb::WritableFile {
   public:
    File(leveldb::WritableFile* f, ValueFileEnv* env) : f_(f), env_(env) {}
    leveldb::Status Append(const leveldb::Slice& d) override {
      if (env_->fail_next_append.exchange(false)) return leveldb::Status::IOError("disk full");
      return f_->Append(d);
    }
    leveldb::Status Close() override { return f_->Close(); }
    leveldb::Status Flush() override { return f_->Flush(); }
    leveldb::Status Sync() override {
      ++env_->syncs;
      return f_->Sync();
    }

   private:
    std::unique_ptr<leveldb::WritableFile> f_;
    ValueFileEnv* env_;
  };
};

// A store at /db on an in-memory ValueFileEnv.
class LevelDbTensorStoreSyncTest : public ::testing::Test {
 protected:
  void Open(uint64_t value_file_bytes = LevelDbOptions().value_file_bytes) {
    LevelDbOptions o;
    o.path = "/db";
    o.env = &env_;
    o.value_file_bytes = value_file_bytes;
    auto store = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  // Puts 4000 bytes, each the last byte of `key`.
  absl::Status Write(const std::string& key, bool sync) {
    auto batch = store_->NewBatch();
    batch->Put(key, std::string(4000, key.back()));
    return store_->Write(batch.get(), sync);
  }
  std::unique_ptr<leveldb::Env> mem_{leveldb::NewMemEnv(leveldb::Env::Default())};
  ValueFileEnv env_{mem_.get()};
  std::unique_ptr<LevelDbTensorStore> store_;
};

TEST_F(LevelDbTensorStoreSyncTest, AFailedValueWriteLeavesNoKeyAndTheNextSyncCoversWhatCameBefore) {
  ASSERT_NO_FATAL_FAILURE(Open());
  const std::string before = ValueKey("t", 0, "w", 1, "a");
  const std::string failed = ValueKey("t", 1, "w", 2, "b");
  const std::string after = ValueKey("t", 2, "w", 3, "c");
  ASSERT_TRUE(Write(before, false).ok());
  env_.fail_next_append = true;
  auto s = Write(failed, false);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("disk full"), std::string::npos) << s;
  auto missing = store_->Get(failed);
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->has_value()) << "a key without its value";
  ASSERT_TRUE(Write(after, false).ok());  // in a new file
  EXPECT_EQ(env_.syncs.load(), 0);
  // A synced write: the file of `before` (abandoned after the failure) and the
  // file of `after` are both synced.
  ASSERT_TRUE(Write(WorkerKey("t", "w"), true).ok());
  EXPECT_EQ(env_.syncs.load(), 2);
  for (const auto& key : {before, after}) {
    auto v = store_->Get(key);
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    EXPECT_EQ(**v, std::string(4000, key.back()));
  }
}

TEST_F(LevelDbTensorStoreSyncTest, ASyncedWriteAlsoSyncsTheValuesWrittenBefore) {
  ASSERT_NO_FATAL_FAILURE(
      Open(/*value_file_bytes=*/10000));  // the fourth value starts a second file
  ASSERT_TRUE(Write(ValueKey("t", 0, "w", 1, "x"), false).ok());
  EXPECT_EQ(env_.syncs.load(), 0);
  // An index-only write with sync: the value before it must be durable too.
  ASSERT_TRUE(Write(WorkerKey("t", "w"), true).ok());
  EXPECT_EQ(env_.syncs.load(), 1);
  // Nothing new in the value log: no second sync of it.
  ASSERT_TRUE(Write(WorkerKey("t", "w"), true).ok());
  EXPECT_EQ(env_.syncs.load(), 1);
  ASSERT_TRUE(Write(ValueKey("t", 1, "w", 2, "x"), true).ok());
  EXPECT_EQ(env_.syncs.load(), 2);
  // Unsynced values in two files (the first closed for writing when full):
  // the next synced write syncs both.
  ASSERT_TRUE(Write(ValueKey("t", 2, "w", 3, "x"), false).ok());
  ASSERT_TRUE(Write(ValueKey("t", 3, "w", 4, "x"), false).ok());
  EXPECT_EQ(env_.syncs.load(), 2);
  ASSERT_TRUE(Write(WorkerKey("t", "w"), true).ok());
  EXPECT_EQ(env_.syncs.load(), 4);
  EXPECT_EQ(mem_->FileExists("/db/values/000002.vlog"), true);
  for (int i = 0; i < 4; ++i) {
    auto v = store_->Get(ValueKey("t", i, "w", i + 1, "x"));
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    EXPECT_EQ(v->value().size(), 4000u);
  }
}

TEST(LevelDbTensorStoreDiskTest, ValueBytesAreWrittenOnceAndNeverCompacted) {
  // Values of increasing steps with the small keys of each step (a block, the
  // worker's commit) in the same batches, as the collector writes them.
  const std::string dir = ::testing::TempDir() + "/tk_store_value_log_test";
  std::filesystem::remove_all(dir);
  LevelDbOptions o;
  o.path = dir;
  o.write_buffer_size = 1 << 20;  // small memtables: the index is flushed often
  const std::string value(64 << 10, 'v');
  const int steps = 400;
  {
    auto store = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    for (uint64_t step = 0; step < steps; ++step) {
      auto batch = (*store)->NewBatch();
      batch->Put(ValueKey("t", step, "w", step + 1, "x"), value);
      batch->Put(BlockKey("t", step, "w", step + 1), "block");
      batch->Put(WorkerKey("t", "w"), std::to_string(step));
      ASSERT_TRUE((*store)->Write(batch.get(), false).ok());
    }
  }
  uintmax_t value_log = 0, index = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    (e.path().extension() == ".vlog" ? value_log : index) += e.file_size();
  }
  EXPECT_EQ(value_log, uintmax_t{steps} * value.size());
  EXPECT_LT(index, uintmax_t{200} << 10) << "the index should hold no value bytes";
  auto store = LevelDbTensorStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  for (uint64_t step : {0, 123, 399}) {
    auto v = (*store)->GetBulk(ValueKey("t", step, "w", step + 1, "x"));
    ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
    EXPECT_EQ(**v, value);
  }
  store->reset();
  std::filesystem::remove_all(dir);
}

TEST(LevelDbTensorStoreDiskTest, SecondOpenOfTheSameDirectoryFailsClearly) {
  const std::string dir = ::testing::TempDir() + "/tk_store_lock_test";
  std::filesystem::remove_all(dir);
  LevelDbOptions o;
  o.path = dir;
  auto first = LevelDbTensorStore::Open(o);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = LevelDbTensorStore::Open(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by another tensorkeep-server"),
            std::string::npos)
      << second.status();
  first->reset();
  std::filesystem::remove_all(dir);
}

TEST(LevelDbTensorStoreDiskTest, TableFilesReadBackThroughPreadAfterReopen) {
  const std::string dir = ::testing::TempDir() + "/tk_store_pread_test";
  std::filesystem::remove_all(dir);
  LevelDbOptions o;
  o.path = dir;
  o.write_buffer_size = 1 << 20;  // small memtables: many table files
  auto value = [](int i) {
    return std::string(40000, static_cast<char>('a' + i % 26)) + std::to_string(i);
  };
  {
    auto store = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 500; ++i) {
      auto batch = (*store)->NewBatch();
      batch->Put("k" + std::to_string(100000 + i), value(i));
      ASSERT_TRUE((*store)->Write(batch.get(), false).ok());
    }
  }
  size_t tables = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".ldb") ++tables;
  }
  EXPECT_GT(tables, 3u) << "the test meant to read from table files";
  auto store = LevelDbTensorStore::Open(o);
  ASSERT_TRUE(store.ok());
  for (int i = 0; i < 500; i += 7) {
    auto v = (*store)->Get("k" + std::to_string(100000 + i));
    ASSERT_TRUE(v.ok()) << v.status();
    ASSERT_TRUE(v->has_value());
    EXPECT_EQ(**v, value(i));
  }
  int n = 0;
  ASSERT_TRUE(
      (*store)->Scan("k", [&](std::string_view, std::string_view) { return ++n > 0; }).ok());
  EXPECT_EQ(n, 500);
  store->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensorkeep
