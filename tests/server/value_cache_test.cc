#include "server/value_cache.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

std::shared_ptr<const std::string> Bytes(size_t n, char c) {
  return std::make_shared<const std::string>(n, c);
}

TEST(ValueCacheTest, ReturnsTheSameBytesWithoutCopying) {
  ValueCache cache(16 << 20);
  auto v = Bytes(100000, 'a');
  cache.Insert("k", v);
  auto got = cache.Lookup("k");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got.get(), v.get()) << "a hit shares the bytes";
  EXPECT_EQ(cache.Lookup("other"), nullptr);
}

TEST(ValueCacheTest, EvictsLeastRecentlyUsedAndSkipsOversizedValues) {
  // 16 shards of 1 MiB: a value of more than 1 MiB is never kept.
  ValueCache cache(16 << 20);
  cache.Insert("huge", Bytes((1 << 20) + 1, 'h'));
  EXPECT_EQ(cache.Lookup("huge"), nullptr);
  // Far more than the capacity: early entries go, the last one stays.
  for (int i = 0; i < 200; ++i) cache.Insert("k" + std::to_string(i), Bytes(512 << 10, 'x'));
  EXPECT_EQ(cache.Lookup("k0"), nullptr);
  EXPECT_NE(cache.Lookup("k199"), nullptr);
}

TEST(ValueCacheTest, AnEvictedValueStaysValidForItsHolder) {
  ValueCache cache(16 << 20);
  cache.Insert("k", Bytes(1000, 'z'));
  auto held = cache.Lookup("k");
  for (int i = 0; i < 200; ++i) cache.Insert("f" + std::to_string(i), Bytes(512 << 10, 'x'));
  EXPECT_EQ(cache.Lookup("k"), nullptr);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(*held, std::string(1000, 'z'));
}

TEST(ValueCacheTest, ZeroCapacityCachesNothing) {
  ValueCache cache(0);
  cache.Insert("k", Bytes(10, 'a'));
  EXPECT_EQ(cache.Lookup("k"), nullptr);
}

}  // namespace
}  // namespace tensorkeep
