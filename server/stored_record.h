// How the collector lays out one tensor record in the store: the mapping
// between the wire's TensorRecord and the stored schema (storage/stored.proto's
// RecordMeta, record blocks of storage/record_block.h).
//
// The records one push message writes for one step are sorted by name and
// packed into record blocks (storage/record_block.h) of about
// kBlockTargetBytes: each entry is the record's metadata (a TensorRecord
// without name, step and data, which the block key and entry already hold)
// and, for values of at most kMaxInlineValueBytes, the value's bytes. Larger
// values get an entry of their own under ValueKey, so that reading one never
// reads its neighbours.
#ifndef TENSORKEEP_SERVER_STORED_RECORD_H_
#define TENSORKEEP_SERVER_STORED_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/tensorkeep.pb.h"
#include "storage/record_block.h"

namespace tensorkeep {

inline constexpr size_t kMaxInlineValueBytes = 1024;
inline constexpr size_t kBlockTargetBytes = 8192;

// Whether the record's bytes go into its block entry.
inline bool StoresInline(const v1::TensorRecord& record) {
  return !record.has_value() || record.value_size() <= kMaxInlineValueBytes;
}

// The block entry's metadata of `record` (a serialized storage::RecordMeta:
// everything but its name, step and data).
std::string EncodeRecordMeta(const v1::TensorRecord& record);

// The record (without data) of a block entry at `step`.
absl::StatusOr<v1::TensorRecord> DecodeRecordMeta(const RecordBlock::Entry& entry, uint64_t step);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_STORED_RECORD_H_
