// CPU placement for benches that stand in for two machines on one: the
// collector's process on one CPU, the clients on the others, so that neither
// takes the other's cycles (a collector on another machine, as deployed).
//
// Linux only (sched_setaffinity); a thread created later inherits the mask of
// the thread that creates it, so a process spawned while the calling thread is
// pinned starts pinned, all of its threads included.
#ifndef TENSORKEEP_BENCH_CPU_PLACEMENT_H_
#define TENSORKEEP_BENCH_CPU_PLACEMENT_H_

#include <sched.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorkeep {
namespace bench {

// The CPUs this thread may run on, ascending.
std::vector<int> AllowedCpus();

// Pins the calling thread to `cpus` until destroyed, then restores its mask.
class ScopedThreadCpus {
 public:
  static absl::StatusOr<ScopedThreadCpus> Pin(const std::vector<int>& cpus);
  ScopedThreadCpus(ScopedThreadCpus&& other) noexcept;
  ScopedThreadCpus& operator=(ScopedThreadCpus&&) = delete;
  ~ScopedThreadCpus();

 private:
  ScopedThreadCpus() = default;
  cpu_set_t saved_;
  bool active_ = false;
};

// Pins every thread of this process to `cpus` until destroyed, then gives
// every thread it has then the mask the calling thread had before.
class ScopedProcessCpus {
 public:
  static absl::StatusOr<ScopedProcessCpus> Pin(const std::vector<int>& cpus);
  ScopedProcessCpus(ScopedProcessCpus&& other) noexcept;
  ScopedProcessCpus& operator=(ScopedProcessCpus&&) = delete;
  ~ScopedProcessCpus();

 private:
  ScopedProcessCpus() = default;
  cpu_set_t saved_;
  bool active_ = false;
};

// "0" or "0,2-3": for messages.
std::string CpuListText(const std::vector<int>& cpus);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_CPU_PLACEMENT_H_
