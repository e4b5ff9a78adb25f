#include "storage/leveldb_tensor_store.h"

#include <filesystem>
#include <memory>
#include <string>

#include <atomic>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "leveldb/env.h"
#include "leveldb/helpers/memenv.h"
#include "storage/keys.h"

namespace tensorkeep {
namespace {

class LevelDbTensorStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { env_.reset(leveldb::NewMemEnv(leveldb::Env::Default())); }
  std::unique_ptr<LevelDbTensorStore> Open() {
    LevelDbOptions o;
    o.path = "/db";
    o.env = env_.get();
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
  for (Read read : {static_cast<Read>(&TensorStore::Get), static_cast<Read>(&TensorStore::GetBulk)}) {
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
  ASSERT_TRUE(store->Scan("a", [&](std::string_view k, std::string_view v) {
    EXPECT_EQ(k, v);
    seen += std::string(k) + ",";
    return true;
  }).ok());
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

TEST_F(LevelDbTensorStoreTest, LargeValuesLiveInADatabaseOfTheirOwn) {
  const std::string value_key = ValueKey("t", 3, "w", 7, "x");
  const std::string block_key = BlockKey("t", 3, "w", 7);
  {
    auto store = Open();
    auto batch = store->NewBatch();
    batch->Put(block_key, "block");
    batch->Put(value_key, std::string(5000, 'v'));
    batch->Put(TrialKey("t"), "trial");
    ASSERT_TRUE(store->Write(batch.get(), true).ok());
  }
  EXPECT_TRUE(env_->FileExists(std::string("/db/") + kValuesSubdir + "/CURRENT"));
  auto store = Open();
  auto v = store->GetBulk(value_key);
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ(**v, std::string(5000, 'v'));
  auto b = store->Get(block_key);
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ(**b, "block");
  std::vector<std::string> values, all;
  ASSERT_TRUE(store->Scan(FamilyPrefix(KeyFamily::kValue), [&](std::string_view k, std::string_view) {
                     values.emplace_back(k);
                     return true;
                   }).ok());
  ASSERT_TRUE(store->Scan("", [&](std::string_view k, std::string_view) {
                     all.emplace_back(k);
                     return true;
                   }).ok());
  EXPECT_EQ(values, std::vector<std::string>({value_key}));
  EXPECT_EQ(all, std::vector<std::string>({TrialKey("t"), block_key}));
}

TEST_F(LevelDbTensorStoreTest, ADirectoryWithoutItsValuesDatabaseIsRefusedNotChanged) {
  {
    auto store = Open();
    auto batch = store->NewBatch();
    batch->Put(TrialKey("t"), "trial");
    ASSERT_TRUE(store->Write(batch.get(), false).ok());
  }
  // What a directory of the one-database layout (storage format 4) looks like.
  const std::string values_dir = std::string("/db/") + kValuesSubdir;
  std::vector<std::string> files;
  ASSERT_TRUE(env_->GetChildren(values_dir, &files).ok());
  for (const auto& f : files) env_->RemoveFile(values_dir + "/" + f);
  LevelDbOptions o;
  o.path = "/db";
  o.env = env_.get();
  auto store = LevelDbTensorStore::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("older tensorkeep"), std::string::npos) << store.status();
  EXPECT_FALSE(env_->FileExists(values_dir + "/CURRENT")) << "the refused directory was changed";
}

// Counts Sync() of the files under one directory.
class SyncCountingEnv : public leveldb::EnvWrapper {
 public:
  SyncCountingEnv(leveldb::Env* base, std::string dir) : EnvWrapper(base), dir_(std::move(dir)) {}
  leveldb::Status NewWritableFile(const std::string& f, leveldb::WritableFile** r) override {
    return Wrap(f, target()->NewWritableFile(f, r), r);
  }
  leveldb::Status NewAppendableFile(const std::string& f, leveldb::WritableFile** r) override {
    return Wrap(f, target()->NewAppendableFile(f, r), r);
  }
  int syncs() const { return syncs_.load(); }

 private:
  class File : public leveldb::WritableFile {
   public:
    File(leveldb::WritableFile* f, std::atomic<int>* syncs) : f_(f), syncs_(syncs) {}
    leveldb::Status Append(const leveldb::Slice& d) override { return f_->Append(d); }
    leveldb::Status Close() override { return f_->Close(); }
    leveldb::Status Flush() override { return f_->Flush(); }
    leveldb::Status Sync() override {
      if (syncs_ != nullptr) ++*syncs_;
      return f_->Sync();
    }

   private:
    std::unique_ptr<leveldb::WritableFile> f_;
    std::atomic<int>* syncs_;
  };
  leveldb::Status Wrap(const std::string& f, leveldb::Status s, leveldb::WritableFile** r) {
    const bool log = f.compare(0, dir_.size(), dir_) == 0 && f.size() > 4 &&
                     f.compare(f.size() - 4, 4, ".log") == 0;
    if (s.ok()) *r = new File(*r, log ? &syncs_ : nullptr);
    return s;
  }
  const std::string dir_;
  std::atomic<int> syncs_{0};
};

TEST(LevelDbTensorStoreSyncTest, ASyncedWriteAlsoSyncsTheValuesWrittenBefore) {
  std::unique_ptr<leveldb::Env> mem(leveldb::NewMemEnv(leveldb::Env::Default()));
  SyncCountingEnv env(mem.get(), std::string("/db/") + kValuesSubdir + "/");
  LevelDbOptions o;
  o.path = "/db";
  o.env = &env;
  auto store = LevelDbTensorStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto write = [&](const std::string& key, bool sync) {
    auto batch = (*store)->NewBatch();
    batch->Put(key, "x");
    return (*store)->Write(batch.get(), sync);
  };
  const int at_open = env.syncs();
  ASSERT_TRUE(write(ValueKey("t", 0, "w", 1, "x"), false).ok());
  EXPECT_EQ(env.syncs(), at_open);
  // An index-only write with sync: the value before it must be durable too.
  ASSERT_TRUE(write(WorkerKey("t", "w"), true).ok());
  EXPECT_EQ(env.syncs(), at_open + 1);
  // Nothing new in the values database: no second sync of it.
  ASSERT_TRUE(write(WorkerKey("t", "w"), true).ok());
  EXPECT_EQ(env.syncs(), at_open + 1);
  ASSERT_TRUE(write(ValueKey("t", 1, "w", 2, "x"), true).ok());
  EXPECT_EQ(env.syncs(), at_open + 2);
}

// From the values database's LevelDB LOG: memtables were written to tables,
// and no table was compacted (rewritten) after.
void ExpectValuesWrittenOnce(const std::string& dir) {
  std::ifstream log(dir + "/" + kValuesSubdir + "/LOG");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_NE(text.str().find("Level-0 table"), std::string::npos) << "no memtable was written";
  EXPECT_EQ(text.str().find("Compacted"), std::string::npos) << text.str();
}

TEST(LevelDbTensorStoreDiskTest, ValuesOfOneWriterAreNeverRewrittenByCompaction) {
  // Values of increasing steps, with the small keys of each step (a block, the
  // worker's commit) in the same batches, as the collector writes them: the
  // values' tables go down the levels without being rewritten.
  const std::string dir = ::testing::TempDir() + "/tk_store_compaction_test";
  std::filesystem::remove_all(dir);
  LevelDbOptions o;
  o.path = dir;
  o.write_buffer_size = 1 << 20;  // many memtable flushes
  {
    auto store = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    const std::string value(64 << 10, 'v');
    for (uint64_t step = 0; step < 400; ++step) {
      auto batch = (*store)->NewBatch();
      batch->Put(ValueKey("t", step, "w", step + 1, "x"), value);
      batch->Put(BlockKey("t", step, "w", step + 1), "block");
      batch->Put(WorkerKey("t", "w"), std::to_string(step));
      ASSERT_TRUE((*store)->Write(batch.get(), false).ok());
    }
    auto v = (*store)->GetBulk(ValueKey("t", 123, "w", 124, "x"));
    ASSERT_TRUE(v.ok() && v->has_value());
    EXPECT_EQ(**v, value);
  }
  ExpectValuesWrittenOnce(dir);
  std::filesystem::remove_all(dir);
}

TEST(LevelDbTensorStoreDiskTest, ValuesOfWritersAtDifferentStepsAreNeverCompactedEither) {
  // Four writers 50 steps apart, their messages interleaved as the committer
  // writes them; block ids increase in that order.
  const std::string dir = ::testing::TempDir() + "/tk_store_writers_test";
  std::filesystem::remove_all(dir);
  LevelDbOptions o;
  o.path = dir;
  o.write_buffer_size = 1 << 20;
  {
    auto store = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    const std::string value(64 << 10, 'v');
    uint64_t block_id = 0;
    for (uint64_t i = 0; i < 100; ++i) {
      for (int w = 0; w < 4; ++w) {
        const std::string worker = "worker_" + std::to_string(w);
        const uint64_t step = i + 50 * (3 - w);
        auto batch = (*store)->NewBatch();
        ++block_id;
        batch->Put(ValueKey("t", step, worker, block_id, "x"), value);
        batch->Put(BlockKey("t", step, worker, block_id), "block");
        ASSERT_TRUE((*store)->Write(batch.get(), false).ok());
      }
    }
  }
  ExpectValuesWrittenOnce(dir);
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
  auto value = [](int i) { return std::string(40000, static_cast<char>('a' + i % 26)) + std::to_string(i); };
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
  ASSERT_TRUE((*store)->Scan("k", [&](std::string_view, std::string_view) { return ++n > 0; }).ok());
  EXPECT_EQ(n, 500);
  store->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensorkeep
