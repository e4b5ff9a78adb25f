#include "tfrecord/event_file_writer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tfrecord/record.h"

namespace tensorkeep {
namespace tfrecord {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class EventFileWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tk_event_file_writer_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(EventFileWriterTest, WritesFileVersionThenEventsWithRealCrcs) {
  auto w = EventFileWriter::Create((dir_ / "run").string(), 1000.5);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(fs::path((*w)->path()).parent_path(), dir_ / "run");
  EXPECT_EQ(fs::path((*w)->path()).filename().string().rfind("events.out.tfevents.1000.", 0), 0u);
  tfevent::HistogramProto h;
  h.set_min(-1);
  h.set_max(2);
  h.set_num(3);
  h.add_bucket_limit(2);
  h.add_bucket(3);
  ASSERT_TRUE((*w)->WriteScalar("loss", 7, 1001.0, 0.25f).ok());
  ASSERT_TRUE((*w)->WriteHistogram("w", 7, 1001.0, h).ok());
  ASSERT_TRUE((*w)->Flush().ok());

  const std::string bytes = ReadAll((*w)->path());
  auto scan = ScanRecords(bytes, /*accept_placeholder=*/false);  // real data CRCs only
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_FALSE(scan->truncated);
  ASSERT_EQ(scan->records.size(), 3u);
  tfevent::Event e;
  ASSERT_TRUE(e.ParseFromString(std::string(scan->records[0].data)));
  EXPECT_EQ(e.file_version(), "brain.Event:2");
  EXPECT_EQ(e.wall_time(), 1000.5);
  ASSERT_TRUE(e.ParseFromString(std::string(scan->records[1].data)));
  EXPECT_EQ(e.step(), 7);
  ASSERT_EQ(e.summary().value_size(), 1);
  EXPECT_EQ(e.summary().value(0).tag(), "loss");
  EXPECT_EQ(e.summary().value(0).simple_value(), 0.25f);
  ASSERT_TRUE(e.ParseFromString(std::string(scan->records[2].data)));
  EXPECT_EQ(e.summary().value(0).histo().num(), 3);
  EXPECT_EQ(e.summary().value(0).histo().bucket(0), 3);

  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_TRUE((*w)->Close().ok());  // twice is fine
  EXPECT_FALSE((*w)->WriteScalar("late", 8, 1002.0, 1.0f).ok());
}

TEST_F(EventFileWriterTest, NothingReachesTheFileBeforeFlushButWholeRecords) {
  auto w = EventFileWriter::Create(dir_.string(), 5.0);
  ASSERT_TRUE(w.ok());
  const size_t after_create = fs::file_size((*w)->path());
  ASSERT_TRUE((*w)->WriteScalar("x", 0, 5.0, 1.0f).ok());
  EXPECT_EQ(fs::file_size((*w)->path()), after_create);  // buffered
  ASSERT_TRUE((*w)->Flush().ok());
  auto scan = ScanRecords(ReadAll((*w)->path()), false);
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(scan->records.size(), 2u);
  EXPECT_FALSE(scan->truncated);
}

TEST_F(EventFileWriterTest, AnUnwritableDirectoryIsAnErrorNamingIt) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  auto w = EventFileWriter::Create((dir_ / "file" / "run").string(), 1.0);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("file/run"), std::string::npos) << w.status();
}

}  // namespace
}  // namespace tfrecord
}  // namespace tensorkeep
