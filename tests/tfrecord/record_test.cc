#include "tfrecord/record.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tfrecord/crc32c.h"

namespace tensorkeep {
namespace tfrecord {
namespace {

std::string Framed(const std::vector<std::string>& records, PayloadCrc crc = PayloadCrc::kData) {
  std::string out;
  for (const auto& r : records) AppendRecord(r, crc, &out);
  return out;
}

TEST(Record, LayoutIsTensorFlows) {
  const std::string file = Framed({"abc"});
  ASSERT_EQ(file.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(file.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(file[at + i]);
    return v;
  };
  EXPECT_EQ(u32(8), MaskCrc(Crc32c(file.substr(0, 8))));
  EXPECT_EQ(file.substr(12, 3), "abc");
  EXPECT_EQ(u32(15), MaskCrc(Crc32c("abc")));
}

TEST(Record, ScanReadsEveryRecord) {
  const std::vector<std::string> in = {"", "x", std::string(70000, 'q'), "last"};
  const std::string file = Framed(in);
  auto scan = ScanRecords(file, false);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_FALSE(scan->truncated);
  ASSERT_EQ(scan->records.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(scan->records[i].data, in[i]);
  EXPECT_EQ(scan->records[1].offset, 16u);
}

TEST(Record, EveryCutInsideTheLastRecordIsACleanTruncatedEnd) {
  const std::string whole = Framed({"first record", "second"});
  const size_t second = 12 + 12 + 4;
  for (size_t cut = second + 1; cut < whole.size(); ++cut) {
    auto scan = ScanRecords(std::string_view(whole).substr(0, cut), false);
    ASSERT_TRUE(scan.ok()) << cut << ": " << scan.status();
    EXPECT_TRUE(scan->truncated) << cut;
    EXPECT_EQ(scan->truncated_at, second);
    ASSERT_EQ(scan->records.size(), 1u) << cut;
    EXPECT_EQ(scan->records[0].data, "first record");
  }
  auto at_boundary = ScanRecords(std::string_view(whole).substr(0, second), false);
  ASSERT_TRUE(at_boundary.ok());
  EXPECT_FALSE(at_boundary->truncated);
}

TEST(Record, CorruptionIsDataLossNamingTheOffset) {
  std::string file = Framed({"one", "two"});
  std::string bad_data = file;
  bad_data[19 + 12] ^= 0x01;  // a byte of "two"
  auto s = ScanRecords(bad_data, true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("byte 19"), std::string::npos) << s.status();
  std::string bad_len = file;
  bad_len[19] ^= 0x01;  // the second record's length
  EXPECT_EQ(ScanRecords(bad_len, true).status().code(), absl::StatusCode::kDataLoss);
}

TEST(Record, SmdebugPlaceholderAcceptedOnlyWhenAsked) {
  const std::string file = Framed({"tensor"}, PayloadCrc::kSmdebugPlaceholder);
  EXPECT_EQ(SmdebugPlaceholderCrc(), MaskCrc(Crc32c("0x12345678")));
  EXPECT_EQ(ScanRecords(file, false).status().code(), absl::StatusCode::kDataLoss);
  auto scan = ScanRecords(file, true);
  ASSERT_TRUE(scan.ok());
  ASSERT_EQ(scan->records.size(), 1u);
  EXPECT_EQ(scan->records[0].crc, PayloadCrc::kSmdebugPlaceholder);
}

}  // namespace
}  // namespace tfrecord
}  // namespace tensorkeep
