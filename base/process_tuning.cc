#include "base/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace tensorkeep {

bool TuneProcessForLargeBuffers(FreedMemory freed) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  bool ok = mallopt(M_MMAP_THRESHOLD, 64 << 20) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, 128 << 20) == 1 && ok;
  if (freed == FreedMemory::kKeep) {
    ok = mallopt(M_TOP_PAD, 256 << 20) == 1 && ok;
  } else {
    ok = mallopt(M_ARENA_MAX, 1) == 1 && ok;
  }
  return ok;
}

size_t ReturnFreedMemory() {
  const size_t free_bytes = mallinfo2().fordblks;
  malloc_trim(0);
  return free_bytes;
}

}  // namespace tensorkeep
