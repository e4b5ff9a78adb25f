// LevelDbTensorStore under injected disk faults (tests/storage/fault_env.h):
// a failed write is never partly visible, never costs a write acknowledged
// before or after it, leaves no litter, and the store serves again once the
// fault clears.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "leveldb/helpers/memenv.h"
#include "storage/keys.h"
#include "storage/leveldb_tensor_store.h"
#include "tests/storage/fault_env.h"

namespace tensorkeep {
namespace {

using ::testing::HasSubstr;

class StoreFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Open()); }
  void Open() {
    LevelDbOptions o;
    o.path = "/db";
    o.env = &env_;
    o.reopen_interval_seconds = 0;
    auto store = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void Reopen() {
    store_.reset();
    ASSERT_NO_FATAL_FAILURE(Open());
  }
  absl::Status Put(const std::string& key, const std::string& value, bool sync = false) {
    auto batch = store_->NewBatch();
    batch->Put(key, value);
    return store_->Write(batch.get(), sync);
  }
  std::string Get(const std::string& key) {
    auto v = store_->Get(key);
    if (!v.ok()) return "error: " + v.status().ToString();
    return v->has_value() ? **v : "absent";
  }
  std::vector<std::string> ValueFiles() {
    std::vector<std::string> children, files;
    mem_->GetChildren("/db/values", &children);
    for (const auto& f : children) {
      if (f.size() > 5 && f.compare(f.size() - 5, 5, ".vlog") == 0) files.push_back(f);
    }
    return files;
  }

  std::unique_ptr<leveldb::Env> mem_{leveldb::NewMemEnv(leveldb::Env::Default())};
  testing::FaultEnv env_{mem_.get()};
  std::unique_ptr<LevelDbTensorStore> store_;
};

// A short write leaves a torn record in LevelDB's log, and LevelDB's log
// writer goes on past it: records written after it in the same 32 KiB block
// would be dropped with it when the log is recovered. The store reopens the
// database before the next write, so every acknowledged write survives.
TEST_F(StoreFaultsTest, ATornLogWriteCostsNoWriteAcknowledgedAfterIt) {
  ASSERT_TRUE(Put(TrialKey("before"), "b").ok());
  env_.FailAppends(".log", 1, /*short_write=*/true);
  absl::Status failed = Put(TrialKey("torn"), std::string(300, 't'));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.message()), HasSubstr("No space left on device"));
  EXPECT_EQ(Get(TrialKey("torn")), "absent");
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(Put(TrialKey("after" + std::to_string(i)), "a" + std::to_string(i)).ok()) << i;
  }
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Get(TrialKey("before")), "b");
  EXPECT_EQ(Get(TrialKey("torn")), "absent");
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(Get(TrialKey("after" + std::to_string(i))), "a" + std::to_string(i)) << i;
  }
}

// A full disk: every attempt fails with the cause until space returns; reads
// of what is stored go on; then writing resumes without a restart.
TEST_F(StoreFaultsTest, WritesResumeByThemselvesOnceTheFaultClears) {
  ASSERT_TRUE(Put(TrialKey("kept"), "k").ok());
  env_.FailAppends(".log", 1000);
  for (int i = 0; i < 5; ++i) {
    absl::Status s = Put(TrialKey("refused"), "r");
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()), HasSubstr("No space left on device")) << s;
    EXPECT_EQ(Get(TrialKey("kept")), "k");
  }
  env_.FailAppends(".log", 0);
  ASSERT_TRUE(Put(TrialKey("later"), "l").ok());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Get(TrialKey("kept")), "k");
  EXPECT_EQ(Get(TrialKey("refused")), "absent");
  EXPECT_EQ(Get(TrialKey("later")), "l");
}

// Each failed value-log append used to leave a new empty file behind (1,110
// of them on a full 64 MiB filesystem).
TEST_F(StoreFaultsTest, FailedValueAppendsLeaveNoEmptyFiles) {
  const std::string first = ValueKey("t", 0, "w", 1, "x");
  ASSERT_TRUE(Put(first, std::string(5000, 'a')).ok());
  ASSERT_EQ(ValueFiles().size(), 1u);
  env_.FailAppends(".vlog", 20);
  for (int i = 0; i < 20; ++i) {
    const std::string key = ValueKey("t", 1 + i, "w", 2 + i, "x");
    EXPECT_FALSE(Put(key, std::string(5000, 'b')).ok());
    EXPECT_EQ(Get(key), "absent") << "a key without its value";
  }
  // The file with good bytes was retired after the first failure; every
  // later file held only a failed write and is gone.
  EXPECT_EQ(ValueFiles().size(), 1u);
  const std::string later = ValueKey("t", 30, "w", 40, "x");
  ASSERT_TRUE(Put(later, std::string(5000, 'c')).ok());
  EXPECT_EQ(ValueFiles().size(), 2u);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Get(first), std::string(5000, 'a'));
  EXPECT_EQ(Get(later), std::string(5000, 'c'));
}

// A batch's values given up (PutOwned) are appended one piece at a time: a
// piece failing after others went through (half of it written) fails the
// write as a whole, no key of it is visible, and the file, whose end is now
// unknown, takes no more appends; what was written before and after reads back.
TEST_F(StoreFaultsTest, AFailedPieceOfAWriteLeavesNoKeyAndNothingBeforeOrAfterIsHarmed) {
  const std::string first = ValueKey("t", 0, "w", 1, "x");
  ASSERT_TRUE(Put(first, std::string(5000, 'a')).ok());
  const std::string k1 = ValueKey("t", 1, "w", 2, "x");
  const std::string k2 = ValueKey("t", 1, "w", 2, "y");
  const std::string k3 = ValueKey("t", 1, "w", 2, "z");
  auto batch = store_->NewBatch();
  batch->PutOwned(k1, std::string(6000, 'b'));
  batch->Put(k2, std::string(3000, 'c'));
  batch->PutOwned(k3, std::string(6000, 'd'));
  env_.FailAppends(".vlog", 1, /*short_write=*/true, /*after=*/1);
  EXPECT_FALSE(store_->Write(batch.get(), false).ok());
  EXPECT_EQ(env_.appends_failed(), 1);
  for (const auto& k : {k1, k2, k3}) EXPECT_EQ(Get(k), "absent") << k;
  auto again = store_->NewBatch();
  again->PutOwned(k1, std::string(6000, 'e'));
  again->Put(k2, std::string(3000, 'f'));
  again->PutOwned(k3, std::string(6000, 'g'));
  ASSERT_TRUE(store_->Write(again.get(), true).ok());
  EXPECT_EQ(ValueFiles().size(), 2u) << "the file with a torn piece took more appends";
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Get(first), std::string(5000, 'a'));
  EXPECT_EQ(Get(k1), std::string(6000, 'e'));
  EXPECT_EQ(Get(k2), std::string(3000, 'f'));
  EXPECT_EQ(Get(k3), std::string(6000, 'g'));
}

// A failed fsync of the value log fails the synced write; the next synced
// write covers everything, and a power cut then loses nothing acknowledged.
TEST_F(StoreFaultsTest, AFailedSyncIsNotAcknowledgedAndTheNextSyncCoversAll) {
  const std::string a = ValueKey("t", 0, "w", 1, "x");
  const std::string b = ValueKey("t", 1, "w", 2, "x");
  const std::string c = ValueKey("t", 2, "w", 3, "x");
  ASSERT_TRUE(Put(a, std::string(5000, 'a'), /*sync=*/true).ok());
  env_.FailSyncs(".vlog", 1);
  EXPECT_FALSE(Put(b, std::string(5000, 'b'), /*sync=*/true).ok());
  EXPECT_EQ(Get(b), "absent");
  ASSERT_TRUE(Put(c, std::string(5000, 'c'), /*sync=*/true).ok());
  store_.reset();
  env_.DropUnsyncedData();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(Get(a), std::string(5000, 'a'));
  EXPECT_EQ(Get(b), "absent");
  EXPECT_EQ(Get(c), std::string(5000, 'c'));
}

// WriteAll: several batches are one atomic write.
TEST_F(StoreFaultsTest, WriteAllIsAllOrNothing) {
  auto b1 = store_->NewBatch();
  auto b2 = store_->NewBatch();
  b1->Put(TrialKey("one"), "1");
  b1->Put(ValueKey("t", 0, "w", 1, "v"), std::string(3000, 'v'));
  b2->Put(TrialKey("two"), "2");
  b2->Put(TrialKey("one"), "1b");  // a later batch wins
  ASSERT_TRUE(store_->WriteAll({b1.get(), b2.get()}, false).ok());
  EXPECT_EQ(Get(TrialKey("one")), "1b");
  EXPECT_EQ(Get(TrialKey("two")), "2");
  EXPECT_EQ(Get(ValueKey("t", 0, "w", 1, "v")), std::string(3000, 'v'));
  auto b3 = store_->NewBatch();
  auto b4 = store_->NewBatch();
  b3->Put(TrialKey("three"), "3");
  b4->Put(TrialKey("four"), "4");
  env_.FailAppends(".log", 1, /*short_write=*/true);
  EXPECT_FALSE(store_->WriteAll({b3.get(), b4.get()}, false).ok());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Get(TrialKey("three")), "absent");
  EXPECT_EQ(Get(TrialKey("four")), "absent");
  EXPECT_EQ(Get(TrialKey("two")), "2");
}

// Two trials' values in one write go to two value files (a lane each): when
// the second file's append fails, neither trial's value has a key, what was
// written before stays, and the next write of both goes through.
TEST_F(StoreFaultsTest, AFailedAppendToOneLaneOfAWriteLeavesNoKeyOfAnyLane) {
  const std::string a0 = ValueKey("a", 0, "w", 1, "x");
  const std::string b0 = ValueKey("b", 0, "w", 2, "x");
  ASSERT_TRUE(Put(a0, std::string(5000, 'a')).ok());
  ASSERT_TRUE(Put(b0, std::string(5000, 'b')).ok());
  ASSERT_EQ(ValueFiles(), (std::vector<std::string>{"000001.vlog", "000002.vlog"}));
  const std::string a1 = ValueKey("a", 1, "w", 3, "x");
  const std::string b1 = ValueKey("b", 1, "w", 3, "x");
  auto batch = store_->NewBatch();
  batch->Put(TrialKey("a"), "meta");
  batch->Put(a1, std::string(5000, 'c'));
  batch->Put(b1, std::string(5000, 'd'));
  env_.FailAppends("000002.vlog", 1);  // b's lane, after a's append went through
  EXPECT_FALSE(store_->Write(batch.get(), false).ok());
  EXPECT_EQ(env_.appends_failed(), 1);
  EXPECT_EQ(Get(a1), "absent");
  EXPECT_EQ(Get(b1), "absent");
  EXPECT_EQ(Get(TrialKey("a")), "absent");
  auto again = store_->NewBatch();
  again->Put(a1, std::string(5000, 'e'));
  again->Put(b1, std::string(5000, 'f'));
  ASSERT_TRUE(store_->Write(again.get(), true).ok());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Get(a0), std::string(5000, 'a'));
  EXPECT_EQ(Get(b0), std::string(5000, 'b'));
  EXPECT_EQ(Get(a1), std::string(5000, 'e'));
  EXPECT_EQ(Get(b1), std::string(5000, 'f'));
}

// A synced write of two trials syncs both lanes' files: when one's fsync
// fails the write is not acknowledged, and the next synced write (of one
// trial only) covers the other file too, so a power cut then loses nothing
// acknowledged.
TEST_F(StoreFaultsTest, AFailedSyncOfOneLaneIsNotAcknowledgedAndTheNextSyncCoversEveryLane) {
  const std::string a0 = ValueKey("a", 0, "w", 1, "x");
  const std::string b0 = ValueKey("b", 0, "w", 2, "x");
  ASSERT_TRUE(Put(a0, std::string(5000, 'a'), /*sync=*/true).ok());
  ASSERT_TRUE(Put(b0, std::string(5000, 'b'), /*sync=*/true).ok());
  const std::string a1 = ValueKey("a", 1, "w", 3, "x");
  const std::string b1 = ValueKey("b", 1, "w", 3, "x");
  auto batch = store_->NewBatch();
  batch->Put(a1, std::string(5000, 'c'));
  batch->Put(b1, std::string(5000, 'd'));
  env_.FailSyncs("000002.vlog", 1);
  EXPECT_FALSE(store_->Write(batch.get(), /*sync=*/true).ok());
  EXPECT_EQ(Get(a1), "absent");
  EXPECT_EQ(Get(b1), "absent");
  // Unsynced bytes of b's lane, then a synced write of a alone.
  const std::string b2 = ValueKey("b", 2, "w", 4, "x");
  ASSERT_TRUE(Put(b2, std::string(5000, 'g')).ok());
  const std::string a2 = ValueKey("a", 2, "w", 5, "x");
  ASSERT_TRUE(Put(a2, std::string(5000, 'h'), /*sync=*/true).ok());
  store_.reset();
  env_.DropUnsyncedData();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(Get(a0), std::string(5000, 'a'));
  EXPECT_EQ(Get(b0), std::string(5000, 'b'));
  EXPECT_EQ(Get(b2), std::string(5000, 'g'));
  EXPECT_EQ(Get(a2), std::string(5000, 'h'));
}

}  // namespace
}  // namespace tensorkeep
