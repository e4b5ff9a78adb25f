#include "bench/cpu_placement.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensorkeep {
namespace bench {

namespace {

cpu_set_t MaskOf(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  return set;
}

absl::Status SetThreadMask(pid_t tid, const cpu_set_t& set) {
  if (sched_setaffinity(tid, sizeof(set), &set) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sched_setaffinity of thread ", tid, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// Every thread of this process (a thread that exits meanwhile is skipped).
void ForEachThread(const cpu_set_t& set) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
    if (tid > 0) (void)sched_setaffinity(tid, sizeof(set), &set);
  }
  closedir(dir);
}

}  // namespace

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

absl::StatusOr<ScopedCpus> ScopedCpus::PinThread(const std::vector<int>& cpus) {
  return Pin(cpus, /*whole_process=*/false);
}

absl::StatusOr<ScopedCpus> ScopedCpus::PinProcess(const std::vector<int>& cpus) {
  return Pin(cpus, /*whole_process=*/true);
}

absl::StatusOr<ScopedCpus> ScopedCpus::Pin(const std::vector<int>& cpus, bool whole_process) {
  ScopedCpus out;
  if (sched_getaffinity(0, sizeof(out.saved_), &out.saved_) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("sched_getaffinity: ", strerror(errno)));
  }
  const cpu_set_t set = MaskOf(cpus);
  if (absl::Status s = SetThreadMask(0, set); !s.ok()) return s;
  if (whole_process) ForEachThread(set);
  out.whole_process_ = whole_process;
  out.active_ = true;
  return out;
}

ScopedCpus::ScopedCpus(ScopedCpus&& other) noexcept
    : saved_(other.saved_), whole_process_(other.whole_process_), active_(other.active_) {
  other.active_ = false;
}

ScopedCpus::~ScopedCpus() {
  if (!active_) return;
  if (whole_process_) {
    ForEachThread(saved_);
  } else {
    (void)sched_setaffinity(0, sizeof(saved_), &saved_);
  }
}

std::string CpuListText(const std::vector<int>& cpus) { return absl::StrJoin(cpus, ","); }

}  // namespace bench
}  // namespace tensorkeep
