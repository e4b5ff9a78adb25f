// SharedRegion: the checks Map makes on what a client hands over, and the
// wake-up of a client waiting for room in the ring (agent/handover.h,
// kRoomWantedOffset).
#include "agent/shared_region.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "agent/handover.h"
#include "gtest/gtest.h"

namespace tensorkeep {
namespace agent {
namespace {

constexpr size_t kBytes = kRegionHeaderBytes + (64 << 10);

int SealedMemfd(size_t size, bool seal = true) {
  const int fd = memfd_create("shared_region_test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  if (seal) EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  return fd;
}

TEST(SharedRegionTest, RefusesAMemfdNotSealedAgainstShrinking) {
  auto region = SharedRegion::Map(SealedMemfd(kBytes, false), kBytes);
  ASSERT_FALSE(region.ok());
  EXPECT_NE(region.status().message().find("F_SEAL_SHRINK"), std::string::npos)
      << region.status();
}

TEST(SharedRegionTest, RefusesARegionSmallerThanAnnounced) {
  auto region = SharedRegion::Map(SealedMemfd(kBytes), kBytes + 4096);
  ASSERT_FALSE(region.ok());
  EXPECT_NE(region.status().message().find("fewer than"), std::string::npos) << region.status();
}

// The client's side: its own mapping of the memfd (another address, as in
// another process), a flag, and FUTEX_WAIT on the low half of `consumed`.
class Client {
 public:
  explicit Client(int fd)
      : base_(static_cast<char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0))) {}
  ~Client() { munmap(base_, kBytes); }
  uint32_t* word(size_t offset) { return reinterpret_cast<uint32_t*>(base_ + offset); }
  uint64_t* wanted() { return reinterpret_cast<uint64_t*>(base_ + kRoomWantedOffset); }
  // Waits up to `timeout_ms` for `consumed` to reach `position`, while its
  // low half is `seen`; true if woken (or it had moved), false at the timeout.
  bool Wait(uint64_t position, uint32_t seen, long timeout_ms) {
    __atomic_store_n(wanted(), position, __ATOMIC_SEQ_CST);
    timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000};
    const long r = syscall(SYS_futex, word(kConsumedOffset), FUTEX_WAIT, seen, &ts, nullptr, 0);
    const int err = errno;
    __atomic_store_n(wanted(), 0, __ATOMIC_SEQ_CST);
    return r == 0 || err == EAGAIN;
  }

 private:
  char* base_;
};

// A region mapped as the agent maps it, a client mapping the same memfd,
// and a client thread waiting for `consumed` to reach 8192.
class RoomWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int fd = SealedMemfd(kBytes);
    client_ = std::make_unique<Client>(fd);
    auto region = SharedRegion::Map(dup(fd), kBytes);
    close(fd);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = std::move(*region);
  }
  void TearDown() override {
    if (waiter_.joinable()) waiter_.join();
  }
  // Starts the waiter (10 s timeout) and returns once it is asleep.
  void StartWaiter() {
    start_ = std::chrono::steady_clock::now();
    waiter_ = std::thread([this] {
      woken_ = client_->Wait(8192, 0, 10000);
      done_ = true;
    });
    while (__atomic_load_n(client_->wanted(), __ATOMIC_SEQ_CST) == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // asleep by now
  }
  // Joins the waiter; expects it woken, well before its timeout.
  void ExpectWoken() {
    waiter_.join();
    EXPECT_TRUE(woken_);
    EXPECT_LT(std::chrono::steady_clock::now() - start_, std::chrono::seconds(5))
        << "woken by its timeout, not by the agent";
  }

  std::unique_ptr<Client> client_;
  std::unique_ptr<SharedRegion> region_;
  std::thread waiter_;
  std::atomic<bool> woken_{false};
  std::atomic<bool> done_{false};
  std::chrono::steady_clock::time_point start_;
};

TEST_F(RoomWaitTest, WakesAClientOnceTheConsumedPositionReachesWhatItWants) {
  StartWaiter();
  region_->StoreU64(kConsumedOffset, 4096);
  region_->WakeWaiters(kConsumedOffset, 4096, kRoomWantedOffset);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(done_) << "woken before `consumed` reached the position it waits for";
  region_->StoreU64(kConsumedOffset, 8192);
  region_->WakeWaiters(kConsumedOffset, 8192, kRoomWantedOffset);
  ExpectWoken();
}

TEST_F(RoomWaitTest, WakesAWaitingClientWhenTheWriterFails) {
  StartWaiter();
  region_->WakeWaiters(kConsumedOffset, 0, kRoomWantedOffset, /*always=*/true);
  ExpectWoken();
}

TEST_F(RoomWaitTest, DoesNotWakeAClientThatWantsNothing) {
  // A waiter that did not say what it waits for sleeps through the agent's
  // wake-up (nothing is woken): it wakes at its 200 ms timeout only.
  std::atomic<long> result{1};
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    timespec ts{0, 200 * 1000000L};
    result = syscall(SYS_futex, client_->word(kConsumedOffset), FUTEX_WAIT, 0, &ts, nullptr, 0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  region_->WakeWaiters(kConsumedOffset, 0, kRoomWantedOffset, /*always=*/true);  // `consumed` unchanged: 0
  waiter.join();
  EXPECT_EQ(result, -1);  // ETIMEDOUT
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
}

}  // namespace
}  // namespace agent
}  // namespace tensorkeep
