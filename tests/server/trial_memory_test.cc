// What the in-memory index (server/trial.h) holds per saved step and per
// record, measured as heap bytes (mallinfo2) while Trial::Apply takes the
// updates the committer gives it. A collector's RAM grows with what it
// stores: a trial saving one scalar a step used to hold ~350 bytes a step in
// memory, more than the step took on disk, and a hundred tensors a step ~39
// bytes a record (docs/shared-collector.md, "Sizing").
#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/trial.h"

namespace tensorkeep {
namespace {

size_t HeapBytes() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Saves `names` at steps [0, steps) from worker_0, one update a step with its
// record block, as a writer ending every step does.
double BytesPerStep(const std::vector<std::string>& names, uint64_t steps) {
  const size_t before = HeapBytes();
  {
    Trial trial("t");
    const size_t empty = HeapBytes();
    for (uint64_t s = 0; s < steps; ++s) {
      TrialUpdate u;
      u.worker = "worker_0";
      u.num_workers = 1;
      for (const std::string& n : names) u.records.push_back(IndexedRecord{n, s, 1, s, {}});
      u.blocks.push_back(BlockRef{s, s + 1, names.front(), names.back()});
      u.committed_through = static_cast<int64_t>(s);
      trial.Apply(u);
    }
    const double per_step = static_cast<double>(HeapBytes() - empty) / steps;
    auto listed = trial.Steps(kModeGlobal, true, "", 0, 0);
    EXPECT_TRUE(listed.ok() && listed->size() == steps);
    return per_step;
  }
  (void)before;
}

bool Measurable() {
  const size_t before = HeapBytes();
  std::vector<char>* v = new std::vector<char>(1 << 20);
  const bool seen = HeapBytes() >= before + (1 << 20);
  delete v;
  return seen;
}

TEST(TrialMemoryTest, OneScalarAStep) {
  if (!Measurable()) GTEST_SKIP() << "mallinfo2 does not see this allocator (a sanitizer's?)";
  const double per_step = BytesPerStep({"gradient/Net_fc1.weight_mean"}, 200000);
  std::printf("one tensor a step: %.1f heap bytes a step\n", per_step);
  // btree slots of steps, mode steps, the tensor's steps and the blocks, the
  // step list: ~130. Copies of the block's names in every step made it ~320,
  // and a 24-byte worker set 151.
  EXPECT_LT(per_step, 145.0);
}

TEST(TrialMemoryTest, AHundredTensorsAStep) {
  if (!Measurable()) GTEST_SKIP() << "mallinfo2 does not see this allocator (a sanitizer's?)";
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) names.push_back(absl::StrCat("layer_", 1000 + i, "/weight"));
  const double per_record = BytesPerStep(names, 5000) / names.size();
  std::printf("a hundred tensors a step: %.1f heap bytes a record\n", per_record);
  // The tensor's btree slot: its step and an 8-byte WorkerSet (~20); it was
  // ~39 with a 24-byte absl::InlinedVector.
  EXPECT_LT(per_record, 28.0);
}

}  // namespace
}  // namespace tensorkeep
