#include "agent/heap.h"

#include <malloc.h>

namespace tensorkeep {
namespace agent {

bool KeepFreedMemoryForReuse() {
  // M_TRIM_THRESHOLD first: setting either turns glibc's adjustment off.
  const bool trim = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapTrimThreshold)) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapMmapThreshold)) == 1;
  const bool arenas = mallopt(M_ARENA_MAX, kHeapArenas) == 1;
  return trim && mmap && arenas;
}

size_t ReturnFreedMemory() {
  const size_t free_bytes = mallinfo2().fordblks;
  malloc_trim(0);
  return free_bytes;
}

}  // namespace agent
}  // namespace tensorkeep
