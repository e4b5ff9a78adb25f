// The value log's garbage accounting and its reclaim (rewriting or dropping
// files), on LevelDB's in-memory Env: garbage is counted when large values
// are deleted and survives a reopen; a reclaim gives the space back and
// every live value reads back bit for bit; a reclaim stopped at any stage
// (as a crash would stop it) leaves every live value readable after a
// reopen, and the next reclaim finishes the job.
#include <map>
#include <memory>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "leveldb/helpers/memenv.h"
#include "leveldb/env.h"
#include "storage/keys.h"
#include "storage/leveldb_tensor_store.h"

namespace tensorkeep {
namespace {

constexpr size_t kValueBytes = 16 << 10;
constexpr int kValues = 24;  // of each trial

std::string Bytes(uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(kValueBytes, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

class ValueReclaimTest : public ::testing::Test {
 protected:
  void SetUp() override { env_.reset(leveldb::NewMemEnv(leveldb::Env::Default())); }

  void Open(std::function<absl::Status(std::string_view)> fault = nullptr, size_t lanes = 1) {
    store_.reset();
    LevelDbOptions o;
    o.path = "/db";
    o.env = env_.get();
    o.value_file_bytes = 64 << 10;  // four values a file
    o.value_lanes = lanes;  // 1: both trials in every file, so reclaims must rewrite
    o.fault_point = std::move(fault);
    auto s = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }

  // Values of "keep" and "drop" interleaved (every file holds both), in
  // batches of two.
  void Fill() {
    for (int i = 0; i < kValues; ++i) {
      auto batch = store_->NewBatch();
      for (const std::string trial : {"keep", "drop"}) {
        const std::string key = ValueKey(trial, i, "w", 100 + i, "t");
        const std::string value = Bytes(trial == "keep" ? i : 1000 + i);
        batch->Put(key, value);
        (trial == "keep" ? keep_ : drop_)[key] = value;
      }
      ASSERT_TRUE(store_->Write(batch.get(), false).ok());
    }
  }
  void DeleteDrop() {
    auto batch = store_->NewBatch();
    for (const auto& [key, value] : drop_) batch->Delete(key);
    ASSERT_TRUE(store_->Write(batch.get(), true).ok());
  }
  void ExpectKeepIntact() {
    for (const auto& [key, value] : keep_) {
      auto got = store_->Get(key);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(got->has_value());
      EXPECT_TRUE(**got == value);
      auto reader = store_->OpenBulk(key);
      ASSERT_TRUE(reader.ok()) << reader.status();
      std::string piece;
      ASSERT_TRUE((*reader)->Read(kValueBytes, &piece).ok());
      EXPECT_TRUE(piece == value);
    }
    for (const auto& [key, value] : drop_) {
      auto got = store_->Get(key);
      ASSERT_TRUE(got.ok());
      EXPECT_FALSE(got->has_value());
    }
  }

  std::unique_ptr<leveldb::Env> env_;
  std::unique_ptr<LevelDbTensorStore> store_;
  std::map<std::string, std::string> keep_, drop_;
};

TEST_F(ValueReclaimTest, DeletedValuesAreGarbageAcrossAReopenAndAReclaimGivesTheSpaceBack) {
  Open();
  Fill();
  const TensorStore::SpaceStats full = store_->Space();
  EXPECT_EQ(full.value_bytes, 2 * kValues * kValueBytes);
  EXPECT_EQ(full.value_garbage_bytes, 0u);
  DeleteDrop();
  EXPECT_EQ(store_->Space().value_garbage_bytes, kValues * kValueBytes);
  Open();  // the counts are in the index
  const TensorStore::SpaceStats deleted = store_->Space();
  EXPECT_EQ(deleted.value_garbage_bytes, kValues * kValueBytes);
  EXPECT_EQ(deleted.value_bytes, full.value_bytes);

  auto stats = store_->ReclaimValueSpace();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->files_dropped, full.value_files);
  EXPECT_EQ(stats->bytes_copied, kValues * kValueBytes);
  const TensorStore::SpaceStats after = store_->Space();
  EXPECT_EQ(after.value_bytes, kValues * kValueBytes);
  EXPECT_EQ(after.value_garbage_bytes, 0u);
  ExpectKeepIntact();
  Open();
  ExpectKeepIntact();
  EXPECT_EQ(store_->Space().value_bytes, kValues * kValueBytes);
}

TEST_F(ValueReclaimTest, FilesWithNothingLiveAreDroppedWithoutCopying) {
  Open();
  Fill();
  // Delete everything: nothing is copied.
  drop_.insert(keep_.begin(), keep_.end());
  keep_.clear();
  DeleteDrop();
  auto stats = store_->ReclaimValueSpace();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes_copied, 0u);
  EXPECT_EQ(stats->files_rewritten, 0u);
  EXPECT_EQ(store_->Space().value_bytes, 0u);
  ExpectKeepIntact();
}

TEST_F(ValueReclaimTest, AReclaimStoppedAtAnyStageLosesNoLiveValue) {
  for (const std::string stage : {"gc.copied", "gc.indexed", "gc.dropping"}) {
    SCOPED_TRACE(stage);
    store_.reset();  // before its Env
    SetUp();
    keep_.clear();
    drop_.clear();
    Open([stage](std::string_view at) {
      return at == stage ? absl::AbortedError(std::string("injected at ") + stage)
                         : absl::OkStatus();
    });
    Fill();
    DeleteDrop();
    auto stopped = store_->ReclaimValueSpace();
    ASSERT_FALSE(stopped.ok());
    EXPECT_NE(stopped.status().message().find("injected"), std::string::npos);
    Open();  // "after the crash"
    ExpectKeepIntact();
    auto stats = store_->ReclaimValueSpace();
    ASSERT_TRUE(stats.ok()) << stats.status();
    ExpectKeepIntact();
    // At most the live bytes plus a file's worth of copies a crash orphaned
    // (only the copy the stop interrupted: counted as garbage or not).
    const TensorStore::SpaceStats after = store_->Space();
    EXPECT_LE(after.value_bytes, kValues * kValueBytes + (64 << 10) + kValueBytes)
        << after.value_files << " files";
    Open();
    ExpectKeepIntact();
  }
}

TEST_F(ValueReclaimTest, AReaderOfAValueBeingMovedReadsEitherCopy) {
  Open();
  Fill();
  DeleteDrop();
  // Readers opened before the reclaim finish reading after it.
  std::map<std::string, std::unique_ptr<TensorStore::BulkReader>> open;
  for (const auto& [key, value] : keep_) {
    auto r = store_->OpenBulk(key);
    ASSERT_TRUE(r.ok());
    open[key] = std::move(*r);
  }
  ASSERT_TRUE(store_->ReclaimValueSpace().ok());
  for (auto& [key, reader] : open) {
    std::string piece;
    ASSERT_TRUE(reader->Read(kValueBytes, &piece).ok());
    EXPECT_TRUE(piece == keep_[key]);
  }
  ExpectKeepIntact();
}

// With a value-log lane a trial (the default), the same interleaved writes
// fill files of one trial each: deleting one drops its files, nothing copied.
TEST_F(ValueReclaimTest, WithLanesADeletedTrialsFilesAreDroppedWithoutCopying) {
  Open(nullptr, kDefaultValueLanes);
  Fill();
  const TensorStore::SpaceStats full = store_->Space();
  EXPECT_EQ(full.value_bytes, 2 * kValues * kValueBytes);
  DeleteDrop();
  auto stats = store_->ReclaimValueSpace();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes_copied, 0u);
  EXPECT_EQ(stats->files_rewritten, 0u);
  EXPECT_EQ(stats->files_dropped, full.value_files / 2);
  EXPECT_EQ(store_->Space().value_bytes, kValues * kValueBytes);
  EXPECT_EQ(store_->Space().value_garbage_bytes, 0u);
  ExpectKeepIntact();
  Open(nullptr, kDefaultValueLanes);
  ExpectKeepIntact();
}

// A directory written with one lane (every file mixed, as before lanes) reads
// the same with lanes, and the reverse; each can then be reclaimed.
TEST_F(ValueReclaimTest, LanesChangeNothingOnDiskAndEitherLayoutReadsWithTheOther) {
  Open(nullptr, 1);
  Fill();
  Open(nullptr, kDefaultValueLanes);
  for (const auto* values : {&keep_, &drop_}) {
    for (const auto& [key, value] : *values) {
      auto got = store_->Get(key);
      ASSERT_TRUE(got.ok() && got->has_value());
      EXPECT_TRUE(**got == value);
    }
  }
  DeleteDrop();
  ASSERT_TRUE(store_->ReclaimValueSpace().ok());
  ExpectKeepIntact();
  Open(nullptr, 1);
  ExpectKeepIntact();
}

// With lanes a reclaim stopped at any stage (a crash) loses nothing either,
// including with copies of the mixed files a one-lane collector left.
TEST_F(ValueReclaimTest, WithLanesAReclaimStoppedAtAnyStageLosesNoLiveValue) {
  for (const std::string stage : {"gc.copied", "gc.indexed", "gc.dropping"}) {
    SCOPED_TRACE(stage);
    store_.reset();
    SetUp();
    keep_.clear();
    drop_.clear();
    Open(nullptr, 1);
    Fill();  // mixed files: the reclaim rewrites them
    Open(nullptr, kDefaultValueLanes);
    for (int i = 0; i < 8; ++i) {  // and a file of "keep" alone
      auto batch = store_->NewBatch();
      const std::string key = ValueKey("keep", 100 + i, "w", 500 + i, "t");
      batch->Put(key, Bytes(5000 + i));
      keep_[key] = Bytes(5000 + i);
      ASSERT_TRUE(store_->Write(batch.get(), false).ok());
    }
    Open(
        [stage](std::string_view at) {
          return at == stage ? absl::AbortedError(std::string("injected at ") + stage)
                             : absl::OkStatus();
        },
        kDefaultValueLanes);
    DeleteDrop();
    auto stopped = store_->ReclaimValueSpace();
    ASSERT_FALSE(stopped.ok());
    Open(nullptr, kDefaultValueLanes);  // "after the crash"
    ExpectKeepIntact();
    auto stats = store_->ReclaimValueSpace();
    ASSERT_TRUE(stats.ok()) << stats.status();
    ExpectKeepIntact();
    Open(nullptr, kDefaultValueLanes);
    ExpectKeepIntact();
  }
}

}  // namespace
}  // namespace tensorkeep
