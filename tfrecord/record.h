// TFRecord framing, the container of TensorBoard event files and of smdebug's
// tensors. One record on disk is
//   uint64 length (little-endian)
//   uint32 masked CRC-32C of those 8 bytes
//   length bytes of data
//   uint32 masked CRC-32C of the data
//
// smdebug writes, unless asked for checksums, the masked CRC-32C of the ten
// bytes "0x12345678" in place of the data's CRC, and its reader (check =
// "minimal", the default) accepts nothing else; PayloadCrc says which of the
// two a writer puts and a reader accepts.
//
// All functions are pure and thread-safe.
#ifndef TENSORKEEP_TFRECORD_RECORD_H_
#define TENSORKEEP_TFRECORD_RECORD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorkeep {
namespace tfrecord {

constexpr size_t kHeaderBytes = 12;  // length + its CRC
constexpr size_t kFooterBytes = 4;   // the data's CRC

enum class PayloadCrc {
  kData,                // the data's masked CRC-32C (TensorFlow, TensorBoard)
  kSmdebugPlaceholder,  // smdebug's fixed value (see above)
};

// The fixed "CRC" smdebug writes in place of the data's.
uint32_t SmdebugPlaceholderCrc();

// Appends the framed record of `data` to `out`.
void AppendRecord(std::string_view data, PayloadCrc crc, std::string* out);

struct Record {
  uint64_t offset = 0;                 // of its header in the file
  std::string_view data;               // points into the scanned bytes
  PayloadCrc crc = PayloadCrc::kData;  // which CRC it carried
};

struct Scan {
  std::vector<Record> records;
  // The file ends inside a record (a writer cut mid-record, by a crash or
  // because it is still writing): the records before it are whole and
  // checked; truncated_at is the offset of the cut record.
  bool truncated = false;
  uint64_t truncated_at = 0;
};

// Reads every record of `file`. A record whose header is complete but whose
// length CRC or data CRC is wrong is corruption: DataLoss naming its offset.
// `accept_placeholder` also accepts smdebug's placeholder data CRC.
absl::StatusOr<Scan> ScanRecords(std::string_view file, bool accept_placeholder);

}  // namespace tfrecord
}  // namespace tensorkeep

#endif  // TENSORKEEP_TFRECORD_RECORD_H_
