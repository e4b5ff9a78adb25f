// The LevelDB key schema of tensorkeep (docs/storage.md).
//
// Every key starts with a family byte, then length-prefixed strings (2-byte
// big-endian length, then the bytes) and big-endian fixed-width integers, so
// that iteration order is numeric step order and no name can collide with
// another by containing a separator.
//
//   kTrial      trial                          -> TrialMeta
//   kWorker     trial, worker                  -> WorkerMeta (commits, close)
//   kBlock      trial, step, worker, block id  -> RecordBlock (storage/record_block.h):
//                                                the metadata of several records,
//                                                and the bytes of the small ones
//   kValue      block id, trial, step, worker, -> storage::ValueRef: where the raw
//               name                             little-endian bytes of a value too
//                                                large for its block are
//                                                (TensorStore::Get reads them)
//                                                (the block holding its metadata)
//   kRule       trial, rule                    -> RuleStatus
//   kCollections   trial, worker               -> storage::WorkerCollections: the
//                                                collection configuration a worker
//                                                sent (PutCollections)
//   kValueGarbage  file                        -> storage::ValueGarbage: bytes of
//                                                a value-log file no key refers to
//                                                any more (kept by the store)
//   kDeletedTrial  trial, block bound          -> storage::DeletedTrial: a trial
//                                                deleted whose blocks (ids below the
//                                                bound) and large values may still
//                                                be in the index; removed last
//
// Blocks are step-major (global step before worker and name) so that
// concurrent writers append near one another, which keeps LevelDB near its
// sequential speed (name-major keys measured 1.5-2x slower for small records:
// every insert landed at a random place of the memtable). A large value's
// key maps to where its bytes are in the value log (storage/value_log.h); the
// keys are only ever read by exact key and sort by block id first: ids
// increase as blocks are written, so the index entries of values append
// whatever step each writer is at. Block ids
// are unique in the database and increase with time, so that the newest
// block wins when a record was written twice. The blocks rebuild the
// in-memory index at start-up without reading any large value. A large
// value's key names its block, so that its bytes and its metadata are always
// of the same write, and the bytes under a key never change.
#ifndef TENSORKEEP_STORAGE_KEYS_H_
#define TENSORKEEP_STORAGE_KEYS_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace tensorkeep {

enum class KeyFamily : uint8_t {
  kFormat = 0,  // one key: the storage format version (kStorageFormat)
  kTrial = 1,
  // 2, 4 and 6 were used by earlier storage formats.
  kWorker = 3,
  kValue = 5,
  kRule = 7,
  kBlock = 8,
  kValueGarbage = 9,
  kDeletedTrial = 10,
  // Added in format 7 without a new version: a database without any reads
  // as trials without configured collections.
  kCollections = 11,
};

// The version of this key schema and its values, stored under FormatKey().
// 5: large values in a database of their own (storage/leveldb_tensor_store.h);
// 6: value keys block-id-major; 7: large values in a value log, their keys
// mapping to storage::ValueRef.
// A server refuses a database of another version instead of misreading it.
inline constexpr char kStorageFormat[] = "tensorkeep-storage-7";

// Longest string a key component may hold (the length prefix is 2 bytes).
inline constexpr size_t kMaxKeyComponent = 0xFFFF;

// Builds keys component by component. Components longer than
// kMaxKeyComponent are a programming error: names are validated before.
class KeyBuilder {
 public:
  explicit KeyBuilder(KeyFamily family);
  KeyBuilder& Str(std::string_view s);
  KeyBuilder& U64(uint64_t v);
  const std::string& key() const { return key_; }
  std::string Take() { return std::move(key_); }

 private:
  std::string key_;
};

// Reads keys built by KeyBuilder. Every getter returns false (and leaves the
// reader unusable) when the key is shorter than the component it asks for.
class KeyReader {
 public:
  explicit KeyReader(std::string_view key) : rest_(key) {}
  bool Family(KeyFamily* family);
  bool Str(std::string_view* s);
  bool U64(uint64_t* v);
  bool AtEnd() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

std::string FormatKey();
std::string TrialKey(std::string_view trial);
std::string WorkerKey(std::string_view trial, std::string_view worker);
std::string BlockKey(std::string_view trial, uint64_t step, std::string_view worker,
                     uint64_t block_id);
std::string ValueKey(std::string_view trial, uint64_t step, std::string_view worker,
                     uint64_t block_id, std::string_view name);
std::string RuleKey(std::string_view trial, std::string_view rule);
std::string CollectionsKey(std::string_view trial, std::string_view worker);
std::string ValueGarbageKey(uint64_t file);
std::string DeletedTrialKey(std::string_view trial, uint64_t block_bound);
// The prefix of the large values of block `block_id` of `trial`.
std::string BlockValuesPrefix(uint64_t block_id, std::string_view trial);
// The trial a ValueKey names (a view into `key`); empty when `key` is not one.
std::string_view ValueKeyTrial(std::string_view key);

// The prefix shared by every key of `family` (and, when given, of `trial`).
std::string FamilyPrefix(KeyFamily family);
std::string TrialPrefix(KeyFamily family, std::string_view trial);

}  // namespace tensorkeep

#endif  // TENSORKEEP_STORAGE_KEYS_H_
