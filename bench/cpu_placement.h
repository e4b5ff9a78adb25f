// CPU placement for benches that stand in for two machines on one: the
// collector's process on one CPU, the clients on the others, so that neither
// takes the other's cycles (a collector on another machine, as deployed).
//
// Linux only (sched_setaffinity). A thread created later inherits the mask of
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

// Pins threads to a set of CPUs until destroyed, then gives them back the
// calling thread's mask from before.
class ScopedCpus {
 public:
  // The calling thread only.
  static absl::StatusOr<ScopedCpus> PinThread(const std::vector<int>& cpus);
  // Every thread of this process; restores every thread it has by then.
  static absl::StatusOr<ScopedCpus> PinProcess(const std::vector<int>& cpus);

  ScopedCpus(ScopedCpus&& other) noexcept;
  ScopedCpus& operator=(ScopedCpus&&) = delete;
  ~ScopedCpus();

 private:
  static absl::StatusOr<ScopedCpus> Pin(const std::vector<int>& cpus, bool whole_process);
  ScopedCpus() = default;
  cpu_set_t saved_;
  bool whole_process_ = false;
  bool active_ = false;
};

// "0" or "0,2,3": for messages.
std::string CpuListText(const std::vector<int>& cpus);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_CPU_PLACEMENT_H_
