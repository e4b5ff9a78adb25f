#include "base/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace tensorkeep {

void TuneProcessForLargeBuffers() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  mallopt(M_TOP_PAD, 256 << 20);
}

}  // namespace tensorkeep
