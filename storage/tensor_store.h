// TensorStore: the ordered key-value store under the collector.
//
// The collector encodes its records with storage/keys.h and writes them
// through this interface; one Batch is applied atomically (a crash leaves all
// of it or none of it). The only implementation is LevelDbTensorStore; tests
// run it on LevelDB's in-memory Env.
//
// Failures: after a write fails (a full disk, an I/O error), the store refuses
// further writes until it has made sure that nothing acknowledged before can be
// lost (LevelDbTensorStore reopens its database); reads go on meanwhile where
// the store can serve them. A failed write is never partly visible.
//
// Thread safety: every method may be called concurrently from any thread.
// A Batch itself is not thread-safe.
#ifndef TENSORKEEP_STORAGE_TENSOR_STORE_H_
#define TENSORKEEP_STORAGE_TENSOR_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensorkeep {

class TensorStore {
 public:
  // A group of puts and deletes applied atomically by Write().
  class Batch {
   public:
    virtual ~Batch() = default;
    virtual void Put(std::string_view key, std::string_view value) = 0;
    // Put of a value the caller gives up: a large value (KeyFamily::kValue)
    // is then kept as it is until written, not copied into the batch.
    virtual void PutOwned(std::string_view key, std::string&& value) { Put(key, value); }
    virtual void Delete(std::string_view key) = 0;
    // Bytes of keys and values held; used for flow control.
    virtual size_t ApproximateSize() const = 0;
  };

  virtual ~TensorStore() = default;

  virtual std::unique_ptr<Batch> NewBatch() = 0;

  // Applies `batch` atomically. Once it returns OK the data is in the store's
  // log and survives a crash of the process; with `sync` it was also fsynced
  // (survives power loss), and so was every write before it.
  // `batch` must come from this store's NewBatch(). (LevelDbTensorStore
  // writes a batch's large values (KeyFamily::kValue) first, to its value
  // log: a crash in between leaves only bytes no key refers to.)
  virtual absl::Status Write(Batch* batch, bool sync) = 0;

  // Applies every batch of `batches` as one atomic write (a crash leaves all
  // of them or none), in order: a later batch's put wins over an earlier
  // one's. The same guarantees as Write; with `sync` one fsync covers them.
  // On failure nothing of them is in the store. Batches must come from this
  // store's NewBatch() and are consumed (they may be changed).
  virtual absl::Status WriteAll(const std::vector<Batch*>& batches, bool sync) = 0;

  // The value of `key`, std::nullopt when absent, an error on I/O failure or
  // corruption.
  virtual absl::StatusOr<std::optional<std::string>> Get(std::string_view key) = 0;
  // The same for a large value read once: it is not kept in the store's
  // block cache, where it would push out the small entries every read needs.
  virtual absl::StatusOr<std::optional<std::string>> GetBulk(std::string_view key) = 0;

  // A value read piece by piece, so that a reader of a large value (GetValue
  // streaming it to a client) never holds it whole.
  class BulkReader {
   public:
    virtual ~BulkReader() = default;
    // The value's size in bytes.
    virtual uint64_t size() const = 0;
    // Bytes not read yet.
    virtual uint64_t remaining() const = 0;
    // Replaces `out` with the next min(max_bytes, remaining()) bytes. The
    // read that returns the last bytes also checks the whole value against
    // its checksum: DataLoss then (the pieces read before are damaged too).
    virtual absl::Status Read(size_t max_bytes, std::string* out) = 0;
    // The CRC-32 (storage/value_log.h ValueChecksum) the whole value must
    // have, when the store keeps one: what the value is can then be checked
    // without reading it.
    virtual std::optional<uint32_t> checksum() const { return std::nullopt; }
  };
  // A reader of `key`'s value, nullptr when absent. The default reads it
  // whole (GetBulk) and hands it out in pieces.
  virtual absl::StatusOr<std::unique_ptr<BulkReader>> OpenBulk(std::string_view key);
  // A reader handing out `bytes`, held in memory already (shared, not copied).
  static std::unique_ptr<BulkReader> ReaderOf(std::shared_ptr<const std::string> bytes);

  // Calls `fn` on every key with `prefix`, in key order, until it returns
  // false. The views are valid only during the call. `prefix` starts with a
  // key family byte (storage/keys.h), or is empty: every key but large values.
  virtual absl::Status Scan(
      std::string_view prefix,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) = 0;

  // Calls `fn` on every key with `prefix` that is >= `from`, in key order,
  // until it returns false, with the size of its entry in the index, without
  // reading values (a large value's bytes are not read: its entry is where
  // they are). Large values' keys are visited like any other.
  virtual absl::Status ScanKeys(std::string_view prefix, std::string_view from,
                                const std::function<bool(std::string_view key, size_t entry_bytes)>& fn) = 0;

  // Space reclamation (a trial's deletion: server/trial_reclaimer.h).
  // Gives back the disk space of keys deleted in [begin, end) now rather than
  // at some later compaction (LevelDB: CompactRange). Slow: off hot paths.
  virtual absl::Status Compact(std::string_view begin, std::string_view end) {
    (void)begin;
    (void)end;
    return absl::OkStatus();
  }
  // What one ReclaimValueSpace did.
  struct ReclaimStats {
    uint64_t files_dropped = 0;    // value files removed (rewritten or all garbage)
    uint64_t files_rewritten = 0;  // of them, files whose live values were copied first
    uint64_t bytes_copied = 0;     // live bytes copied to a new file
    uint64_t bytes_freed = 0;      // size of the files removed
  };
  // Drops the large-value files (no longer written to) whose live bytes are
  // at most the store's threshold of their size, first copying their live
  // values to the newest file (each copy's index entries change in one atomic
  // write, only where they still point to the old copy). Readers of a value
  // being moved read it from either copy. Runs in the background: writers
  // wait only for the short index writes. One call at a time.
  virtual absl::StatusOr<ReclaimStats> ReclaimValueSpace() { return ReclaimStats(); }
  // The large-value files and their garbage (bytes no key refers to), as
  // tracked across restarts.
  struct SpaceStats {
    uint64_t value_files = 0;
    uint64_t value_bytes = 0;
    uint64_t value_garbage_bytes = 0;
  };
  virtual SpaceStats Space() { return SpaceStats(); }
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_STORAGE_TENSOR_STORE_H_
