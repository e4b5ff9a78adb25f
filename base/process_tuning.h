// Process-wide settings for a process that moves large tensors through
// freshly allocated buffers (tensorkeep-server, and tensorkeep-bench, which
// hosts a collector and its writers in one process).
#ifndef TENSORKEEP_BASE_PROCESS_TUNING_H_
#define TENSORKEEP_BASE_PROCESS_TUNING_H_

namespace tensorkeep {

// - glibc malloc: keep large buffers in the heap instead of mapping and
//   unmapping each (~2.5 ms of page faults per fresh 1 MiB mapping on the
//   reference machine), and keep the memory of threads' arenas once touched:
//   by default an emptied 64 MiB sub-heap of a thread arena is unmapped and
//   faulted in again at the next burst (page faults were ~20 % of the CPU of
//   64 KiB ingest). Peak RSS is unchanged; memory is not given back to the
//   system after a peak.
// - Debian's abseil checks every absl::Mutex acquisition for lock cycles:
//   ~1 % of the write path, guarding nothing a test does not.
void TuneProcessForLargeBuffers();

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_PROCESS_TUNING_H_
