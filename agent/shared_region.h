// SharedRegion: a client's shared memory (a memfd it handed over), mapped by
// the agent.
//
// The client could otherwise shrink the file under the mapping and have the
// agent die of SIGBUS when it reads: only a memfd sealed against shrinking
// is accepted (F_SEAL_SHRINK), and its size is checked once, at Map().
//
// Thread safety: a region is used by its session's thread only.
#ifndef TENSORKEEP_AGENT_SHARED_REGION_H_
#define TENSORKEEP_AGENT_SHARED_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorkeep {
namespace agent {

class SharedRegion {
 public:
  // Maps `fd` (taking ownership) read-write when it is a memfd sealed against
  // shrinking of at least `min_bytes`; InvalidArgument naming what is wrong
  // otherwise (fd closed).
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Map(int fd, uint64_t min_bytes);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  uint64_t size() const { return size_; }
  // `len` bytes at `offset`; the caller checked offset + len <= size().
  absl::string_view Bytes(uint64_t offset, uint64_t len) const {
    return absl::string_view(static_cast<const char*>(base_) + offset, len);
  }
  // Where the agent writes `offset` (the header's strings).
  char* Mutable(uint64_t offset) { return static_cast<char*>(base_) + offset; }
  // Stores into the header, visible to the client (release order).
  void StoreU64(size_t offset, uint64_t value);
  void StoreU32(size_t offset, uint32_t value);
  // After a store of `value` into the u64 at `offset` (`consumed`): wakes the
  // client's threads waiting (FUTEX_WAIT) on its low half when the u64 at
  // `wanted_offset` is set and `value` reached it, or, with `always`, when it
  // is set at all (the writer failed). A fence orders the store before the
  // check, and FUTEX_WAIT re-reads the word after the client set `wanted`:
  // a move of `value` is never missed (a wake-up with `always` and no move
  // can be, and the client's sleep is bounded).
  void WakeWaiters(size_t offset, uint64_t value, size_t wanted_offset, bool always = false);

 private:
  SharedRegion(int fd, void* base, uint64_t size) : fd_(fd), base_(base), size_(size) {}
  int fd_;
  void* base_;
  uint64_t size_;
};

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_SHARED_REGION_H_
