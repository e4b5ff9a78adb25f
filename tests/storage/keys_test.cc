#include "storage/keys.h"

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

TEST(KeysTest, ValueKeyRoundTrips) {
  const std::string key =
      ValueKey("trial-1", 123456789012345ull, "worker_3", 77, "layer/1:weight");
  KeyReader r(key);
  KeyFamily f;
  std::string_view trial, worker, name;
  uint64_t step, block_id;
  ASSERT_TRUE(r.Family(&f));
  EXPECT_EQ(f, KeyFamily::kValue);
  ASSERT_TRUE(r.U64(&block_id));
  ASSERT_TRUE(r.Str(&trial));
  ASSERT_TRUE(r.U64(&step));
  ASSERT_TRUE(r.Str(&worker));
  ASSERT_TRUE(r.Str(&name));
  EXPECT_TRUE(r.AtEnd());
  EXPECT_EQ(trial, "trial-1");
  EXPECT_EQ(step, 123456789012345ull);
  EXPECT_EQ(worker, "worker_3");
  EXPECT_EQ(block_id, 77u);
  EXPECT_EQ(name, "layer/1:weight");
}

TEST(KeysTest, ValueKeyRoundTripsNamesWithSeparatorsAndZeros) {
  const std::string name("a\0b/c", 5);
  const std::string key = ValueKey("t", 7, "w", 1, name);
  KeyReader r(key);
  KeyFamily f;
  std::string_view trial, got, worker;
  uint64_t step, block_id;
  ASSERT_TRUE(r.Family(&f) && r.U64(&block_id) && r.Str(&trial) && r.U64(&step) &&
              r.Str(&worker) && r.Str(&got));
  EXPECT_EQ(got, name);
  EXPECT_EQ(step, 7u);
  EXPECT_EQ(worker, "w");
}

TEST(KeysTest, BlockKeyRoundTripsAndSortsByStepThenWorkerThenId) {
  const std::string key = BlockKey("trial-1", 42, "worker_3", 1ull << 40);
  KeyReader r(key);
  KeyFamily f;
  std::string_view trial, worker;
  uint64_t step, id;
  ASSERT_TRUE(r.Family(&f) && r.Str(&trial) && r.U64(&step) && r.Str(&worker) && r.U64(&id) &&
              r.AtEnd());
  EXPECT_EQ(f, KeyFamily::kBlock);
  EXPECT_EQ(trial, "trial-1");
  EXPECT_EQ(step, 42u);
  EXPECT_EQ(worker, "worker_3");
  EXPECT_EQ(id, 1ull << 40);
  EXPECT_LT(BlockKey("t", 1, "worker_9", 900), BlockKey("t", 2, "worker_0", 1));
  EXPECT_LT(BlockKey("t", 1, "worker_0", 900), BlockKey("t", 1, "worker_1", 1));
  EXPECT_LT(BlockKey("t", 1, "w", 255), BlockKey("t", 1, "w", 256));
}

TEST(KeysTest, StepsSortNumericallyNotLexically) {
  std::vector<uint64_t> steps = {0, 1, 2, 9, 10, 11, 99, 100, 255, 256, 65535, 65536,
                                 1ull << 32, (1ull << 62) - 1};
  std::vector<std::string> keys;
  for (uint64_t s : steps) keys.push_back(BlockKey("trial", s, "worker_0", 1));
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, keys);
}

TEST(KeysTest, ValueKeysSortByBlockIdFirst) {
  // Block ids increase as blocks are written, so values append in the values
  // database whatever step each writer is at; numerically, not lexically.
  EXPECT_LT(ValueKey("t", 9, "worker_9", 1, "zzz"), ValueKey("t", 1, "worker_0", 2, "aaa"));
  EXPECT_LT(ValueKey("zz", 1, "w", 255, "x"), ValueKey("aa", 1, "w", 256, "x"));
  EXPECT_LT(ValueKey("t", 1, "w", 7, "a"), ValueKey("t", 1, "w", 7, "b"));
}

TEST(KeysTest, NoTwoDistinctComponentListsShareAKey) {
  // Names containing what a separator-based encoding would use cannot collide.
  EXPECT_NE(RuleKey("a", "bc"), RuleKey("ab", "c"));
  EXPECT_NE(WorkerKey("ab", "c"), WorkerKey("a", "bc"));
  EXPECT_NE(ValueKey("t", 1, "w", 1, "n"), ValueKey("t", 1, "w", 1, std::string("n\0\0", 3)));
}

TEST(KeysTest, FamiliesAndTrialsArePrefixes) {
  const std::string prefix = TrialPrefix(KeyFamily::kBlock, "t1");
  EXPECT_EQ(BlockKey("t1", 3, "w", 1).rfind(prefix, 0), 0u);
  EXPECT_NE(BlockKey("t10", 3, "w", 1).rfind(prefix, 0), 0u) << "t10 must not match t1";
  EXPECT_EQ(TrialKey("t").rfind(FamilyPrefix(KeyFamily::kTrial), 0), 0u);
}

TEST(KeysTest, ReaderRejectsTruncatedKeys) {
  const std::string key = ValueKey("trial", 5, "worker_0", 1, "name");
  for (size_t n = 0; n < key.size(); ++n) {
    KeyReader r(std::string_view(key).substr(0, n));
    KeyFamily f;
    std::string_view a, b, c;
    uint64_t s, id;
    const bool ok =
        r.Family(&f) && r.U64(&id) && r.Str(&a) && r.U64(&s) && r.Str(&b) && r.Str(&c);
    EXPECT_FALSE(ok) << "prefix of length " << n << " parsed";
  }
}

TEST(KeysTest, RandomRoundTrips) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 1000; ++i) {
    std::string name(rng() % 300, '\0');
    for (char& c : name) c = static_cast<char>(rng());
    const uint64_t step = rng() >> 2;
    const std::string key = ValueKey("trial", step, "w", 1, name);
    KeyReader r(key);
    KeyFamily f;
    std::string_view t, n, w;
    uint64_t s, id;
    ASSERT_TRUE(r.Family(&f) && r.U64(&id) && r.Str(&t) && r.U64(&s) && r.Str(&w) && r.Str(&n));
    EXPECT_EQ(n, name);
    EXPECT_EQ(s, step);
    EXPECT_TRUE(r.AtEnd());
  }
}

}  // namespace
}  // namespace tensorkeep
