#include "agent/shared_region.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tensorkeep {
namespace agent {

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Map(int fd, uint64_t min_bytes) {
  const auto fail = [fd](absl::string_view what) {
    close(fd);
    return absl::InvalidArgumentError(what);
  };
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return fail(absl::StrCat("the shared memory handed over is not a sealable memfd (",
                             std::strerror(errno), ")"));
  }
  if ((seals & F_SEAL_SHRINK) == 0) {
    return fail("the shared memory handed over is not sealed against shrinking (F_SEAL_SHRINK)");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(absl::StrCat("fstat: ", std::strerror(errno)));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < min_bytes) {
    return fail(absl::StrCat("the shared memory handed over has ", size, " bytes, fewer than the ",
                             min_bytes, " announced"));
  }
  void* base = size == 0 ? nullptr : mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail(absl::StrCat("mmap: ", std::strerror(errno)));
  return std::unique_ptr<SharedRegion>(new SharedRegion(fd, base, size));
}

SharedRegion::~SharedRegion() {
  if (base_ != nullptr) munmap(base_, size_);
  close(fd_);
}

void SharedRegion::StoreU64(size_t offset, uint64_t value) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(static_cast<char*>(base_) + offset), value,
                   __ATOMIC_RELEASE);
}

void SharedRegion::StoreU32(size_t offset, uint32_t value) {
  __atomic_store_n(reinterpret_cast<uint32_t*>(static_cast<char*>(base_) + offset), value,
                   __ATOMIC_RELEASE);
}

void SharedRegion::WakeWaiters(size_t offset, uint64_t value, size_t wanted_offset, bool always) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  const uint64_t wanted = __atomic_load_n(
      reinterpret_cast<const uint64_t*>(static_cast<char*>(base_) + wanted_offset), __ATOMIC_RELAXED);
  // Not after every value the client does not need to hear of (a step of
  // many small values before a large one woke it once a value).
  if (wanted == 0 || (!always && value < wanted)) return;
  // Shared (not FUTEX_PRIVATE_FLAG): the waiter is another process. Failure
  // is harmless: the client's wait is bounded and re-reads `consumed`.
  (void)syscall(SYS_futex, static_cast<char*>(base_) + offset, FUTEX_WAKE, INT_MAX, nullptr,
                nullptr, 0);
}

}  // namespace agent
}  // namespace tensorkeep
