// base/process_tuning.h, FreedMemory::kReturnWhenAsked (the agent's): memory
// freed is reused without page faults, and goes back to the system when
// asked. Faults are counted (getrusage), as the cost they stand for: ~13 us
// each on the reference VM.
#include "base/process_tuning.h"

#include <malloc.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

constexpr size_t kBlock = size_t{1} << 20;  // a value of 1 MiB
constexpr int kBlocks = 64;                // 64 MiB, as a writer's buffer holds
constexpr long kPages = kBlocks * static_cast<long>(kBlock / 4096);

long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Allocates, fills and frees kBlocks blocks (the values of a few steps,
// acknowledged), twice; returns the page faults of the second round.
long FaultsOfASecondRound() {
  long faults = 0;
  for (int round = 0; round < 2; ++round) {
    std::vector<char*> blocks;
    const long before = MinorFaults();
    for (int i = 0; i < kBlocks; ++i) {
      char* p = static_cast<char*>(malloc(kBlock));
      EXPECT_NE(p, nullptr);
      memset(p, i, kBlock);
      blocks.push_back(p);
    }
    faults = MinorFaults() - before;
    for (char* p : blocks) free(p);
  }
  return faults;
}

TEST(ProcessTuningTest, FreedValuesAreReusedWithoutPageFaultsAndGoBackWhenAsked) {
  // glibc's starting thresholds (128 KiB each): every 1 MiB value a mapping
  // of its own, faulted in page by page each time.
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 << 10), 1);
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 128 << 10), 1);
  const long with_defaults = FaultsOfASecondRound();
  EXPECT_GT(with_defaults, kPages / 2) << "the control did not fault: the test cannot tell";

  ASSERT_TRUE(TuneProcessForLargeBuffers(FreedMemory::kReturnWhenAsked));
  (void)FaultsOfASecondRound();  // the first round grows the heap once
  const long kept = FaultsOfASecondRound();
  EXPECT_LT(kept, kPages / 50) << "with defaults: " << with_defaults;

  // Given back: the free memory is counted, and the next round faults again.
  const size_t free_bytes = ReturnFreedMemory();
  EXPECT_GE(free_bytes, kBlocks * kBlock);
  std::vector<char*> blocks;
  const long before = MinorFaults();
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(static_cast<char*>(malloc(kBlock)));
    memset(blocks.back(), i, kBlock);
  }
  EXPECT_GT(MinorFaults() - before, kPages / 2);
  for (char* p : blocks) free(p);
}

}  // namespace
}  // namespace tensorkeep
