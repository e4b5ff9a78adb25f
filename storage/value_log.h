// ValueLog: the bytes of large tensor values, appended to files of their own.
//
// The index (LevelDB) keeps, under each value's key, where its bytes are: a
// storage::ValueRef (file, offset, size, CRC-32). Why not LevelDB: a value
// stored in LevelDB is copied into its log (with a CRC), into the memtable,
// then into a table file (another CRC, another write); measured, that was
// most of the collector's CPU per ingested byte (docs/performance.md, R4).
// Here a value is written once and read with one pread. Values are never
// changed in place: a key's value is replaced by writing a new one elsewhere.
//
// Files are `NNNNNN.vlog` in one directory; every Open starts a new file
// (a crashed process may have left a torn tail in the last one), and a file is
// closed for writing once it holds `max_file_bytes`. Files and the directory are created at
// the first Append, so opening a directory changes nothing in it.
//
// Lanes: values are appended to one of several files open at once, chosen by
// a lane key (LevelDbTensorStore passes the trial's name), so that a file
// holds one trial's values while at most `max_lanes` trials write at the same
// time: deleting a trial then leaves whole files without a live byte, dropped
// without copying anything (bench/README.md, "Reclaimed space"). A key seen
// for the first time takes a lane no key holds, else the lane used least
// recently (its file then holds both keys' values). The empty key has a lane
// of its own (ReclaimValueSpace's copies). Which file a value is in is kept by
// its storage::ValueRef, so lanes change nothing on disk: a directory written
// with one lane reads the same with several, and the reverse.
//
// Thread safety: every method may be called concurrently.
#ifndef TENSORKEEP_STORAGE_VALUE_LOG_H_
#define TENSORKEEP_STORAGE_VALUE_LOG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/stored.pb.h"

namespace leveldb {
class Env;
class RandomAccessFile;
class WritableFile;
}  // namespace leveldb

namespace tensorkeep {

// CRC-32 (gzip's, computed by libdeflate) of `data`, as kept in storage::ValueRef::crc32.
uint32_t ValueChecksum(std::string_view data);

class ValueLog {
 public:
  // Read handles kept open at most (one descriptor each).
  static constexpr size_t kMaxOpenFiles = 256;

  // `env` is not owned and must outlive the log. Reads the directory's file
  // numbers; creates nothing. `sync_directory`: Sync also fsyncs `dir` after
  // a file was created in it (a real directory; not with an in-memory Env).
  // `max_lanes` (at least 1): keyed lanes, besides the empty key's.
  static absl::StatusOr<std::unique_ptr<ValueLog>> Open(leveldb::Env* env, std::string dir,
                                                        bool sync_directory,
                                                        uint64_t max_file_bytes,
                                                        size_t max_lanes = 1);
  ~ValueLog();

  // Appends `data` (a batch's values, back to back) to the file of `lane`'s
  // lane and hands it to the operating system: once this returns it survives
  // a crash of the process. Returns where `data` starts; a value at byte k of
  // `data` is at offset start + k of that file.
  struct Position {
    uint64_t file = 0;
    uint64_t offset = 0;
  };
  absl::StatusOr<Position> Append(std::string_view data, std::string_view lane = {});
  // The same for `pieces` one after another (a batch's values as they came,
  // without joining them first): one position, a failure as for one write.
  absl::StatusOr<Position> Append(const std::vector<std::string>& pieces,
                                  std::string_view lane = {});

  // Makes every appended byte durable (fsync of each file of every lane
  // appended to since the last Sync); nothing to do when nothing was appended
  // since the last Sync.
  absl::Status Sync();

  // The value `ref` points to. DataLoss when the file is missing, shorter than
  // `ref` says, or the bytes do not match its checksum; the message names the
  // file and the offset.
  absl::StatusOr<std::string> Read(const storage::ValueRef& ref);

  // The value `ref` points to, read piece by piece: each Read preads the
  // next piece; the last one checks the checksum of the whole value (the same
  // DataLoss errors as Read). Keeps its file open even if the log drops it.
  class Cursor {
   public:
    uint64_t size() const { return ref_.size(); }
    uint64_t remaining() const { return ref_.size() - done_; }
    uint32_t checksum() const { return ref_.crc32(); }
    absl::Status Read(size_t max_bytes, std::string* out);

   private:
    friend class ValueLog;
    Cursor(const ValueLog* log, std::shared_ptr<leveldb::RandomAccessFile> file,
           storage::ValueRef ref)
        : log_(log), file_(std::move(file)), ref_(std::move(ref)) {}
    const ValueLog* log_;
    std::shared_ptr<leveldb::RandomAccessFile> file_;
    storage::ValueRef ref_;
    uint64_t done_ = 0;
    uint32_t crc_ = 0;
  };
  absl::StatusOr<std::unique_ptr<Cursor>> OpenCursor(const storage::ValueRef& ref);

  std::string FileName(uint64_t file) const;

  // ---- Reclaiming space (LevelDbTensorStore::ReclaimValueSpace) ----

  // The files being appended to (one a lane that has one open), ascending.
  std::vector<uint64_t> active_files();
  // Closes `file` for writing if a lane appends to it: that lane's next
  // Append starts a new file, and this one can be rewritten and removed.
  void Rotate(uint64_t file);
  // Every value file: its number and size, in number order.
  std::vector<std::pair<uint64_t, uint64_t>> Files();
  // Removes `file` (not the active one): readers that opened it before keep
  // reading their open handle; later reads of it fail with DataLoss.
  absl::Status Drop(uint64_t file);

 private:
  absl::StatusOr<Position> AppendPieces(const std::string_view* pieces, size_t count,
                                        std::string_view key);

  // A file open for appending, and the key it was last appended for.
  struct Lane {
    std::string key;
    bool keyed = false;  // `key` holds this lane (the empty key's lane always does)
    uint64_t last_use = 0;
    uint64_t file = 0;  // 0: none open for writing
    uint64_t file_size = 0;
    std::unique_ptr<leveldb::WritableFile> out;
    bool unsynced = false;  // `out` holds bytes not yet synced
  };
  ValueLog(leveldb::Env* env, std::string dir, uint64_t next_file, bool sync_directory,
           uint64_t max_file_bytes, size_t max_lanes);
  Lane* LaneFor(std::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::StatusOr<std::shared_ptr<leveldb::RandomAccessFile>> Reader(uint64_t file);
  // DataLoss naming `ref`'s file: it ends before `ref`'s bytes, or they do not
  // match their checksum.
  absl::Status Truncated(const storage::ValueRef& ref) const;
  absl::Status Damaged(const storage::ValueRef& ref) const;
  // False when the file `ref` names cannot hold its bytes (a damaged index
  // entry must not make a reader allocate what the file cannot hold).
  bool FileHolds(const storage::ValueRef& ref) const;
  // Closes `lane`'s file (after the next Sync when it holds unsynced bytes).
  void RetireFile(Lane* lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status StartFile(Lane* lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  leveldb::Env* const env_;
  const std::string dir_;
  const bool sync_directory_;
  const uint64_t max_file_bytes_;

  absl::Mutex write_mu_;
  bool dir_created_ ABSL_GUARDED_BY(write_mu_) = false;
  uint64_t next_file_ ABSL_GUARDED_BY(write_mu_);
  uint64_t appends_ ABSL_GUARDED_BY(write_mu_) = 0;  // the clock of Lane::last_use
  // lanes_[0]: the empty key's; then the keyed lanes.
  std::vector<Lane> lanes_ ABSL_GUARDED_BY(write_mu_);
  // Files closed for writing with bytes not yet synced: Sync covers them too.
  std::vector<std::unique_ptr<leveldb::WritableFile>> unsynced_closed_ ABSL_GUARDED_BY(write_mu_);
  bool directory_unsynced_ ABSL_GUARDED_BY(write_mu_) = false;

  absl::Mutex read_mu_;
  std::map<uint64_t, std::shared_ptr<leveldb::RandomAccessFile>> readers_ ABSL_GUARDED_BY(read_mu_);
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_STORAGE_VALUE_LOG_H_
