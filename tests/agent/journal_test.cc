// The agent's journal (agent/journal.h): entries read back in order, a torn
// tail (a frame cut short, or one whose checksum does not match) is discarded
// and truncated, never misread, and the space limit refuses an append. The
// leftover journals of one writer are found in the order they were made.
#include "agent/journal.h"
#include "agent/journal_replay.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tensorkeep {
namespace agent {
namespace {

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tk-journal-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)!system(absl::StrCat("rm -rf '", dir_, "'").c_str()); }

  static Journal::Entry Record(uint64_t step, const std::string& data) {
    Journal::Entry e;
    e.kind = Journal::Entry::kRecord;
    e.record.set_name(absl::StrCat("t", step));
    e.record.set_step(step);
    e.record.set_data(data);
    return e;
  }
  static Journal::Entry EndStep(uint64_t step) {
    Journal::Entry e;
    e.kind = Journal::Entry::kEndStep;
    e.step = step;
    return e;
  }
  // Writes 3 steps (record + end) to a new journal; returns its path.
  std::string WriteThreeSteps(JournalSpace* space, uint64_t* size_after_two) {
    Journal::Header h{"127.0.0.1:1", "trial", "worker_0", 2, 3};
    auto j = Journal::Create(dir_, "j", h, space);
    EXPECT_TRUE(j.ok()) << j.status();
    for (uint64_t s = 0; s < 3; ++s) {
      EXPECT_TRUE((*j)->Append(Record(s, std::string(1000 + s, char('a' + s)))).ok());
      EXPECT_TRUE((*j)->Append(EndStep(s)).ok());
      if (s == 1) *size_after_two = (*j)->size();
    }
    EXPECT_TRUE((*j)->Sync().ok());
    return (*j)->path();
  }
  static uint64_t FileSize(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  }

  std::string dir_;
};

TEST_F(JournalTest, ReadsBackInOrderAfterReopening) {
  JournalSpace space(1 << 20);
  uint64_t two;
  const std::string path = WriteThreeSteps(&space, &two);
  EXPECT_EQ(space.used(), 0u);  // closed: given back
  Journal::Header h;
  auto j = Journal::OpenExisting(path, &space, &h);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(h.target, "127.0.0.1:1");
  EXPECT_EQ(h.trial, "trial");
  EXPECT_EQ(h.worker, "worker_0");
  EXPECT_EQ(h.num_workers, 2u);
  EXPECT_EQ(h.attempt, 3u);
  EXPECT_EQ((*j)->entries(), 6u);
  EXPECT_EQ(space.used(), FileSize(path));
  for (uint64_t s = 0; s < 3; ++s) {
    Journal::Entry e;
    ASSERT_TRUE(*(*j)->Read(&e));
    ASSERT_EQ(e.kind, Journal::Entry::kRecord);
    EXPECT_EQ(e.record.step(), s);
    EXPECT_EQ(e.record.data(), std::string(1000 + s, char('a' + s)));
    ASSERT_TRUE(*(*j)->Read(&e));
    ASSERT_EQ(e.kind, Journal::Entry::kEndStep);
    EXPECT_EQ(e.step, s);
  }
  Journal::Entry e;
  EXPECT_FALSE(*(*j)->Read(&e));
  EXPECT_TRUE((*j)->AllRead());
  (*j)->Remove();
  EXPECT_EQ(FileSize(path), 0u);
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_EQ(space.used(), 0u);
}

TEST_F(JournalTest, ATailCutShortIsDiscarded) {
  JournalSpace space(1 << 20);
  uint64_t two;
  const std::string path = WriteThreeSteps(&space, &two);
  // The third step's record cut in the middle of its data: its end of step
  // is gone too, and the record must not be read as a shorter one.
  const uint64_t cut = two + 8 + 1 + 500;
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(cut)), 0);
  Journal::Header h;
  auto j = Journal::OpenExisting(path, &space, &h);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)->entries(), 4u);
  EXPECT_EQ(FileSize(path), two);  // truncated to the last whole entry
  Journal::Entry e;
  int records = 0;
  while (*(*j)->Read(&e)) records += e.kind == Journal::Entry::kRecord;
  EXPECT_EQ(records, 2);
  // Appending after the cut continues a well-formed journal.
  ASSERT_TRUE((*j)->Append(EndStep(7)).ok());
  ASSERT_TRUE((*j)->Sync().ok());
  j->reset();
  auto again = Journal::OpenExisting(path, &space, &h);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->entries(), 5u);
}

TEST_F(JournalTest, AFrameWithABadChecksumEndsTheJournal) {
  JournalSpace space(1 << 20);
  uint64_t two;
  const std::string path = WriteThreeSteps(&space, &two);
  // Flip one byte of the third record's data (its length stays right).
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(pread(fd, &c, 1, static_cast<off_t>(two + 8 + 100)), 1);
  c ^= 0x40;
  ASSERT_EQ(pwrite(fd, &c, 1, static_cast<off_t>(two + 8 + 100)), 1);
  close(fd);
  Journal::Header h;
  auto j = Journal::OpenExisting(path, &space, &h);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)->entries(), 4u);  // the damaged frame and the intact one after it
  EXPECT_EQ(FileSize(path), two);
}

TEST_F(JournalTest, AGarbageFileIsRefused) {
  JournalSpace space(1 << 20);
  const std::string path = dir_ + "/x.tkj";
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_EQ(write(fd, "not a journal at all", 20), 20);
  close(fd);
  Journal::Header h;
  auto j = Journal::OpenExisting(path, &space, &h);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(JournalTest, TheSpaceLimitRefusesAnAppend) {
  JournalSpace space(8 << 10);
  Journal::Header h{"t", "trial", "w", 1};
  auto j = Journal::Create(dir_, "small", h, &space);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_TRUE((*j)->Append(Record(0, std::string(4000, 'x'))).ok());
  const absl::Status s = (*j)->Append(Record(1, std::string(6000, 'y')));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE((*j)->Append(EndStep(0)).ok());  // a small entry still fits
  EXPECT_EQ((*j)->entries(), 2u);
  EXPECT_LE(space.used(), space.limit());
}

// One writer's journals replay one after another in name order, so the names
// must sort in the order the session made them: the writer's in-memory items
// a stopping agent journals (-N-a) before journal N, journal 9 before 10, and
// sessions and agents by number.
TEST_F(JournalTest, LeftoverJournalsOfAWriterSortInTheOrderTheyWereMade) {
  const std::vector<std::string> made = {
      "run.worker_0.0000999-000002-000009-a", "run.worker_0.0000999-000002-000009",
      "run.worker_0.0000999-000002-000010",   "run.worker_0.0000999-000011-000001",
      "run.worker_0.0001000-000001-000001",
  };
  for (const auto& name : made) {
    const int fd = open(absl::StrCat(dir_, "/", name, Journal::kSuffix).c_str(),
                        O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
  }
  const std::vector<std::string> found = LeftoverJournals(dir_);
  ASSERT_EQ(found.size(), made.size());
  for (size_t i = 0; i < made.size(); ++i) {
    EXPECT_EQ(found[i], absl::StrCat(dir_, "/", made[i], Journal::kSuffix));
    EXPECT_EQ(JournalWriterKey(found[i]), "run.worker_0");
  }
  EXPECT_NE(JournalWriterKey(absl::StrCat(dir_, "/run.worker_1.0000999-000002-000009.tkj")),
            JournalWriterKey(found[0]));
}

}  // namespace
}  // namespace agent
}  // namespace tensorkeep
