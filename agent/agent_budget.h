// AgentBudget: the memory the agent's clients may make it hold, in total
// (--memory-budget-mb): each writer's shared ring and its writer's buffer,
// reserved when it opens, and a value too large for a ring while it is
// pushed. A client that does not fit is refused with RESOURCE_EXHAUSTED,
// naming the budget; the agent never grows beyond it.
//
// Thread safety: every method is thread-safe.
#ifndef TENSORKEEP_AGENT_AGENT_BUDGET_H_
#define TENSORKEEP_AGENT_AGENT_BUDGET_H_

#include <cstdint>
#include <mutex>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorkeep {
namespace agent {

class AgentBudget {
 public:
  explicit AgentBudget(uint64_t limit) : limit_(limit) {}

  class Reservation {
   public:
    Reservation() = default;
    Reservation(AgentBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    Reservation(Reservation&& o) noexcept
        : budget_(std::exchange(o.budget_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    Reservation& operator=(Reservation&& o) noexcept {
      if (this != &o) {
        Release();
        budget_ = std::exchange(o.budget_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
      }
      return *this;
    }
    ~Reservation() { Release(); }
    void Release();

   private:
    AgentBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // Room for `bytes` of `what`, or ResourceExhausted naming the budget.
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, absl::string_view what);
  uint64_t limit() const { return limit_; }
  uint64_t used() const;

 private:
  const uint64_t limit_;
  mutable std::mutex mu_;
  uint64_t used_ = 0;
};

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_AGENT_BUDGET_H_
