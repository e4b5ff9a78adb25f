// A steady-clock deadline some seconds from now, as the agent's sessions
// take them from a client (max_stall_seconds, retry_timeout): infinity, and
// anything past ~30 years, is "never".
#ifndef TENSORKEEP_AGENT_DEADLINE_H_
#define TENSORKEEP_AGENT_DEADLINE_H_

#include <algorithm>
#include <chrono>

namespace tensorkeep {
namespace agent {

inline std::chrono::steady_clock::time_point DeadlineAfter(double seconds) {
  using Clock = std::chrono::steady_clock;
  if (!(seconds < 1e9)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, seconds)));
}

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_DEADLINE_H_
