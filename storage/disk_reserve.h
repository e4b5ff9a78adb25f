// A file of preallocated space kept in the data directory so that the
// collector can always start again, even on a disk something else filled.
//
// Opening the index database writes (LevelDB turns its log into a table and
// starts a new log and manifest), so on a full filesystem it fails and the
// collector could not even serve queries. The store keeps this reserve; when
// an open fails for want of space it releases the reserve and opens again,
// then the disk guard refuses new data until space is freed, and the reserve
// is taken back once the filesystem has room for it and the guard's margin.
//
// Not thread-safe: the store calls it under its write lock.
#ifndef TENSORKEEP_STORAGE_DISK_RESERVE_H_
#define TENSORKEEP_STORAGE_DISK_RESERVE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tensorkeep {

// The reserve's file name in the data directory.
inline constexpr char kReserveFileName[] = "RESERVE";

class DiskReserve {
 public:
  // The reserve `bytes` long at `directory`/RESERVE (not created yet). 0
  // bytes: no reserve (every call does nothing).
  DiskReserve(const std::string& directory, uint64_t bytes);

  uint64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

  // True if the reserve file exists with its full size.
  bool Held() const;

  // Deletes the reserve file; true if there was one to delete.
  bool Release();

  // Creates the reserve (posix_fallocate, so the space is really taken)
  // unless it is held already. A failure (ENOSPC) removes what was made and
  // returns the error naming the file; the caller tries again later.
  absl::Status Take();

 private:
  std::string path_;
  uint64_t bytes_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_STORAGE_DISK_RESERVE_H_
