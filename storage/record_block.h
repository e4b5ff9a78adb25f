// RecordBlock: several tensor records of one (trial, step, worker) in one
// LevelDB entry, sorted by name.
//
// A push message that carries many small records (a thousand scalars a step
// is common) would otherwise cost one or two LevelDB entries per record, and
// LevelDB's per-entry work (memtable skiplist insert, log framing, key
// compares over long shared prefixes) dominated the collector's CPU. A block
// holds the metadata of up to a few KiB of records and the bytes of the small
// ones; large values keep an entry of their own (storage/keys.h ValueKey).
//
// Layout (all lengths are varint32, as protobuf writes them):
//
//   entry*                  entry = len name | len meta | len data
//   offset* (fixed32 LE)    where each entry starts, one per entry
//   count   (fixed32 LE)
//
// `meta` is whatever the caller encodes (the collector: a TensorRecord
// without name, step and data); `data` is empty when the value lives outside
// the block. Names are strictly increasing, so a lookup is a binary search
// that decodes log2(count) names.
#ifndef TENSORKEEP_STORAGE_RECORD_BLOCK_H_
#define TENSORKEEP_STORAGE_RECORD_BLOCK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorkeep {

class RecordBlockBuilder {
 public:
  // Names must be added in strictly increasing order.
  void Add(std::string_view name, std::string_view meta, std::string_view data);
  size_t count() const { return offsets_.size(); }
  // Bytes so far (without the trailer).
  size_t size_bytes() const { return bytes_.size(); }
  // The encoded block; the builder is empty afterwards.
  std::string Finish();

 private:
  std::string bytes_;
  std::vector<uint32_t> offsets_;
};

// A parsed view of a block; the bytes must outlive it.
class RecordBlock {
 public:
  struct Entry {
    std::string_view name;
    std::string_view meta;
    std::string_view data;
  };

  // Checks the whole layout (every offset, length and the name order), so
  // that the accessors below cannot read out of bounds on a corrupt entry.
  static absl::StatusOr<RecordBlock> Parse(std::string_view bytes);

  size_t size() const { return count_; }
  Entry at(size_t i) const;
  std::optional<Entry> Find(std::string_view name) const;

 private:
  RecordBlock(std::string_view bytes, size_t count) : bytes_(bytes), count_(count) {}
  uint32_t offset(size_t i) const;
  std::string_view name_at(size_t i) const;

  std::string_view bytes_;  // without the trailer's count
  size_t count_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_STORAGE_RECORD_BLOCK_H_
