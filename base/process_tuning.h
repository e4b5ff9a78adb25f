// Process-wide settings for a process that moves large tensors through
// freshly allocated buffers: tensorkeep-server, tensorkeep-bench (which hosts
// a collector and its writers in one process) and tensorkeep-agent (which
// copies every value out of a training process's ring and frees it once the
// collector acknowledged it).
#ifndef TENSORKEEP_BASE_PROCESS_TUNING_H_
#define TENSORKEEP_BASE_PROCESS_TUNING_H_

#include <cstddef>

namespace tensorkeep {

// What a process does with the memory it freed after a burst.
enum class FreedMemory {
  // Kept for good (the collector, a service of its own): a thread arena's
  // touched sub-heaps stay too (M_TOP_PAD).
  kKeep,
  // Kept for reuse until ReturnFreedMemory gives it back (the agent, which
  // shares a training node): one arena, because malloc_trim gives back the
  // top of the main heap only, never of a thread's arena. With thread arenas,
  // 15.7 of the 27 MB an agent held for a writer of 64 x 1 MiB values stayed
  // after malloc_trim; with one, 0.2 MB. The agent's threads allocate a few
  // blocks a value: no contention measured (1.6 MB steps, 0.88-0.89 ms of the
  // agent's CPU a step either way).
  kReturnWhenAsked,
};

// - glibc malloc: keep large buffers in the heap instead of mapping and
//   unmapping each (~2.5 ms of page faults per fresh 1 MiB mapping on the
//   reference machine), with fixed thresholds: glibc's own adjust to what was
//   freed last, and at times left the heap trimmed and regrown at every step
//   (the agent: 161 page faults and 3.2 ms of CPU a 1.6 MB step in 1 of 5
//   runs, at ~13 us a fault). With kKeep, also keep the memory of threads'
//   arenas once touched: by default an emptied 64 MiB sub-heap of a thread
//   arena is unmapped and faulted in again at the next burst (page faults
//   were ~20 % of the CPU of 64 KiB ingest). Peak RSS is unchanged.
// - Debian's abseil checks every absl::Mutex acquisition for lock cycles:
//   ~1 % of the write path, guarding nothing a test does not.
// Call once, before any thread starts. False if glibc refused a setting.
bool TuneProcessForLargeBuffers(FreedMemory freed = FreedMemory::kKeep);

// Gives the heap's free memory back to the system (malloc_trim); returns the
// free bytes the heap held before (what it could give back).
size_t ReturnFreedMemory();

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_PROCESS_TUNING_H_
