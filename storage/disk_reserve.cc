#include "storage/disk_reserve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tensorkeep {

DiskReserve::DiskReserve(const std::string& directory, uint64_t bytes)
    : path_(absl::StrCat(directory, "/", kReserveFileName)), bytes_(bytes) {}

bool DiskReserve::Held() const {
  if (bytes_ == 0) return false;
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) return false;
  // Allocated blocks, not the apparent size: a sparse file reserves nothing.
  return static_cast<uint64_t>(st.st_size) >= bytes_ &&
         static_cast<uint64_t>(st.st_blocks) * 512 >= bytes_;
}

bool DiskReserve::Release() {
  if (bytes_ == 0) return false;
  return ::unlink(path_.c_str()) == 0;
}

absl::Status DiskReserve::Take() {
  if (bytes_ == 0 || Held()) return absl::OkStatus();
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create the disk reserve ", path_));
  }
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
  const int fsync_err = err == 0 && ::fsync(fd) != 0 ? errno : 0;
  ::close(fd);
  if (err != 0 || fsync_err != 0) {
    ::unlink(path_.c_str());
    return absl::ErrnoToStatus(err != 0 ? err : fsync_err,
                               absl::StrCat("cannot allocate the disk reserve ", path_, " (",
                                            bytes_ >> 20, " MiB)"));
  }
  return absl::OkStatus();
}

}  // namespace tensorkeep
