#include "storage/leveldb_tensor_store.h"

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "leveldb/env.h"
#include "leveldb/helpers/memenv.h"

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
