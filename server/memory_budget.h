// MemoryBudget: the one budget of memory that clients can make the collector
// hold (--memory-budget-mb): records in transit (a record waiting for its
// Chunk messages, batches queued for the committer) and the value cache.
//
// Modelled on LevelDB's write_buffer_size and gRPC's resource quota: every
// buffer a client can grow draws on it. Push streams stop reading while it is
// over its limit (backpressure); a record that cannot get its room is refused
// (UNAVAILABLE while others hold the budget, RESOURCE_EXHAUSTED when it could
// never fit), with a message naming the budget and how to raise it.
//
// Thread safety: every method is thread-safe.
#ifndef TENSORKEEP_SERVER_MEMORY_BUDGET_H_
#define TENSORKEEP_SERVER_MEMORY_BUDGET_H_

#include <atomic>
#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorkeep {

class MemoryBudget {
 public:
  explicit MemoryBudget(size_t limit) : limit_(limit) {}

  size_t limit() const { return limit_; }
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  bool over() const { return used() >= limit_; }

  // Holds `bytes` of the budget until destroyed (or Release()d). Movable.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(MemoryBudget* budget, size_t bytes) : budget_(budget), bytes_(bytes) {}
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
    void Release() {
      if (budget_ != nullptr) budget_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
      budget_ = nullptr;
      bytes_ = 0;
    }
    size_t bytes() const { return bytes_; }

   private:
    MemoryBudget* budget_ = nullptr;
    size_t bytes_ = 0;
  };

  // Room for `bytes` of `what` (e.g. "tensor 'x'"), or Unavailable when the
  // budget is in use (retry later) and ResourceExhausted when `bytes` could
  // never fit (more than half the budget).
  absl::StatusOr<Reservation> Reserve(size_t bytes, absl::string_view what);
  // Counts `bytes` already held (a message gRPC has delivered): never fails;
  // the budget may go over its limit, and readers then pause.
  Reservation Hold(size_t bytes) {
    used_.fetch_add(bytes, std::memory_order_relaxed);
    return Reservation(this, bytes);
  }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_MEMORY_BUDGET_H_
