// The agent's heap. Every value a training process hands over is copied out
// of its shared ring into the agent's memory, and freed once the collector
// has acknowledged it: at 1.6 MB a step, the agent allocates and frees
// hundreds of MB a minute, in blocks of up to a ring's size.
//
// glibc's defaults (its mmap threshold, then a trim threshold twice that,
// both moved by what was freed last) gave that memory back to the system and
// took it again, a page fault per 4 KiB page each time: on the reference VM,
// where a fault costs ~13 us, up to 160 faults and 2 ms of the agent's CPU a
// saved step of 1.6 MB, which made the agent, not the collector, the stage
// training waited for (issue 16). KeepFreedMemoryForReuse fixes the
// thresholds instead; ReturnFreedMemory gives the kept memory back when no
// writer is left. What is kept never exceeds what the writers held at their
// peak, which the memory budget (--memory-budget-mb) bounds.
#ifndef TENSORKEEP_AGENT_HEAP_H_
#define TENSORKEEP_AGENT_HEAP_H_

#include <cstddef>

namespace tensorkeep {
namespace agent {

// Blocks up to this size come from the heap, not a mapping of their own:
// glibc's largest mmap threshold on 64-bit (larger values are refused).
inline constexpr size_t kHeapMmapThreshold = size_t{32} << 20;
// Free memory at the top of the heap kept for reuse, past which glibc gives
// it back.
inline constexpr size_t kHeapTrimThreshold = size_t{256} << 20;
// One heap for every thread: malloc_trim gives back the top of the main
// heap only, never of a thread's own (glibc's arenas). With one a thread,
// 15.7 of the 27 MB a writer of 64 x 1 MiB values had left stayed after
// ReturnFreedMemory; with one, 0.2 MB. The agent's threads allocate a few
// blocks a value, no contention measured (1.6 MB steps: 0.88-0.89 ms of the
// agent's CPU a step either way).
inline constexpr int kHeapArenas = 1;

// Sets the thresholds and arenas above (mallopt), turning off glibc's
// adjustment of the thresholds. Call once, before any thread starts. False if
// glibc refused one.
bool KeepFreedMemoryForReuse();

// Gives the heap's free memory back to the system (malloc_trim); returns the
// free bytes the heap held before (what it could give back).
size_t ReturnFreedMemory();

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_HEAP_H_
