#include "tfrecord/record.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "tfrecord/crc32c.h"

namespace tensorkeep {
namespace tfrecord {
namespace {

void PutFixed32(uint32_t v, std::string* out) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  out->append(b, 4);
}

uint32_t GetFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t GetFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

uint32_t SmdebugPlaceholderCrc() {
  static const uint32_t crc = MaskedCrc32c("0x12345678");
  return crc;
}

void AppendRecord(std::string_view data, PayloadCrc crc, std::string* out) {
  char len[8];
  const uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out->append(len, 8);
  PutFixed32(MaskedCrc32c(std::string_view(len, 8)), out);
  out->append(data.data(), data.size());
  PutFixed32(crc == PayloadCrc::kData ? MaskedCrc32c(data) : SmdebugPlaceholderCrc(), out);
}

absl::StatusOr<Scan> ScanRecords(std::string_view file, bool accept_placeholder) {
  Scan scan;
  uint64_t pos = 0;
  while (pos < file.size()) {
    const uint64_t left = file.size() - pos;
    if (left < kHeaderBytes) {
      scan.truncated = true;
      scan.truncated_at = pos;
      break;
    }
    const char* h = file.data() + pos;
    const uint32_t len_crc = GetFixed32(h + 8);
    if (len_crc != MaskedCrc32c(std::string_view(h, 8))) {
      return absl::DataLossError(
          absl::StrCat("record at byte ", pos, ": the length's CRC does not match (corrupt file)"));
    }
    const uint64_t len = GetFixed64(h);
    if (len > left - kHeaderBytes || left - kHeaderBytes - len < kFooterBytes) {
      scan.truncated = true;
      scan.truncated_at = pos;
      break;
    }
    std::string_view data(h + kHeaderBytes, len);
    const uint32_t data_crc = GetFixed32(h + kHeaderBytes + len);
    Record r{pos, data, PayloadCrc::kData};
    if (data_crc != MaskedCrc32c(data)) {
      if (!accept_placeholder || data_crc != SmdebugPlaceholderCrc()) {
        return absl::DataLossError(
            absl::StrCat("record at byte ", pos, " (", len,
                         " bytes): the data's CRC does not match (corrupt file)"));
      }
      r.crc = PayloadCrc::kSmdebugPlaceholder;
    }
    scan.records.push_back(r);
    pos += kHeaderBytes + len + kFooterBytes;
  }
  return scan;
}

}  // namespace tfrecord
}  // namespace tensorkeep
