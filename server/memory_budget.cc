#include "server/memory_budget.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tensorkeep {

absl::StatusOr<MemoryBudget::Reservation> MemoryBudget::Reserve(size_t bytes,
                                                                absl::string_view what) {
  if (bytes > limit_ / 2) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " needs ", bytes >> 20,
                     " MiB in transit, more than half of the collector's memory "
                     "budget of ",
                     limit_ >> 20, " MiB: raise tensorkeep-server --memory-budget-mb"));
  }
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used + bytes > limit_) {
      return absl::UnavailableError(
          absl::StrCat("the collector's memory budget (", limit_ >> 20, " MiB, ", used >> 20,
                       " MiB in use) has no room for the ", bytes >> 20, " MiB of ", what,
                       " now: resend it later, or raise tensorkeep-server --memory-budget-mb"));
    }
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return Reservation(this, bytes);
}

}  // namespace tensorkeep
