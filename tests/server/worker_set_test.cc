// WorkerSet: the workers of one (tensor, step) in 8 bytes, inline up to three
// and in the trial's pool beyond: the same ids in the same order as a vector
// given the same inserts, whatever the size.
#include "server/worker_set.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

std::vector<uint16_t> Ids(const WorkerSet& s, const WorkerSetPool& pool) {
  const auto ids = s.ids(pool);
  return std::vector<uint16_t>(ids.begin(), ids.end());
}

TEST(WorkerSetTest, EmptyHoldsNothing) {
  WorkerSetPool pool;
  WorkerSet s;
  EXPECT_TRUE(s.ids(pool).empty());
  EXPECT_EQ(pool.size(), 0u);
}

TEST(WorkerSetTest, InsertsWhereAskedInlineAndPooled) {
  std::mt19937 rng(3);
  WorkerSetPool pool;
  std::vector<WorkerSet> sets(50);
  std::vector<std::vector<uint16_t>> expected(50);
  for (int round = 0; round < 2000; ++round) {
    const size_t k = rng() % sets.size();
    const size_t index = rng() % (expected[k].size() + 1);
    const uint16_t id = static_cast<uint16_t>(rng() % 65535);
    sets[k].Insert(index, id, &pool);
    expected[k].insert(expected[k].begin() + static_cast<std::ptrdiff_t>(index), id);
    ASSERT_EQ(Ids(sets[k], pool), expected[k]) << "set " << k << " round " << round;
  }
  for (size_t k = 0; k < sets.size(); ++k) EXPECT_EQ(Ids(sets[k], pool), expected[k]);
}

TEST(WorkerSetTest, OnlySetsBeyondThreeTakeThePool) {
  WorkerSetPool pool;
  WorkerSet a, b;
  for (uint16_t i = 0; i < WorkerSet::kInline; ++i) a.Insert(i, i, &pool);
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(Ids(a, pool), (std::vector<uint16_t>{0, 1, 2}));
  a.Insert(0, 65534, &pool);  // the fourth moves it to the pool, once
  a.Insert(4, 7, &pool);
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_EQ(Ids(a, pool), (std::vector<uint16_t>{65534, 0, 1, 2, 7}));
  b.Insert(0, 9, &pool);
  EXPECT_EQ(Ids(b, pool), (std::vector<uint16_t>{9}));
  EXPECT_EQ(Ids(a, pool), (std::vector<uint16_t>{65534, 0, 1, 2, 7}));
}

}  // namespace
}  // namespace tensorkeep
