#include "agent/agent_budget.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensorkeep {
namespace agent {

void AgentBudget::Reservation::Release() {
  if (budget_ != nullptr) {
    std::lock_guard<std::mutex> lock(budget_->mu_);
    budget_->used_ -= bytes_;
  }
  budget_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<AgentBudget::Reservation> AgentBudget::Reserve(uint64_t bytes,
                                                              absl::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > limit_ - used_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tensorkeep-agent cannot take ", what, " (", bytes >> 20, " MiB): ", used_ >> 20,
        " MiB of its memory budget of ", limit_ >> 20,
        " MiB are in use by other writers (raise tensorkeep-agent --memory-budget-mb, or "
        "lower the writers' max_queue_bytes)"));
  }
  used_ += bytes;
  return Reservation(this, bytes);
}

uint64_t AgentBudget::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

}  // namespace agent
}  // namespace tensorkeep
