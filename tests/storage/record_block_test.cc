#include "storage/record_block.h"

#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(RecordBlockTest, EveryEntryRoundTripsAndIsFoundByName) {
  std::mt19937_64 rng(7);
  // Names with zero bytes, lengths around varint boundaries (127/128, 16383/16384).
  std::map<std::string, std::pair<std::string, std::string>> expected;
  for (size_t len : {1, 5, 127, 128, 300}) {
    expected[RandomBytes(rng, len)] = {RandomBytes(rng, len % 40), RandomBytes(rng, 16383)};
    expected[RandomBytes(rng, len)] = {"", RandomBytes(rng, 16384)};
    expected[RandomBytes(rng, len)] = {RandomBytes(rng, 3), ""};
  }
  RecordBlockBuilder builder;
  for (const auto& [name, md] : expected) builder.Add(name, md.first, md.second);
  EXPECT_EQ(builder.count(), expected.size());
  const std::string bytes = builder.Finish();
  EXPECT_EQ(builder.count(), 0u) << "Finish leaves the builder empty";

  auto block = RecordBlock::Parse(bytes);
  ASSERT_TRUE(block.ok()) << block.status();
  ASSERT_EQ(block->size(), expected.size());
  size_t i = 0;
  for (const auto& [name, md] : expected) {
    const RecordBlock::Entry e = block->at(i++);
    EXPECT_EQ(e.name, name);
    EXPECT_EQ(e.meta, md.first);
    EXPECT_EQ(e.data, md.second);
    auto found = block->Find(name);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->name, name);
    EXPECT_EQ(found->meta, md.first);
    EXPECT_EQ(found->data, md.second);
  }
  // Names between, before and after the stored ones are absent.
  EXPECT_FALSE(block->Find("").has_value());
  EXPECT_FALSE(block->Find(std::string(400, '\xff')).has_value());
  for (const auto& [name, md] : expected) {
    EXPECT_FALSE(block->Find(name + std::string(1, '\0')).has_value());
  }
}

TEST(RecordBlockTest, SingleEntryAndEmptyStrings) {
  RecordBlockBuilder builder;
  builder.Add("loss", "", "");
  const std::string bytes = builder.Finish();
  auto block = RecordBlock::Parse(bytes);
  ASSERT_TRUE(block.ok()) << block.status();
  ASSERT_EQ(block->size(), 1u);
  auto e = block->Find("loss");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->meta.empty());
  EXPECT_TRUE(e->data.empty());
  EXPECT_FALSE(block->Find("los").has_value());
  EXPECT_FALSE(block->Find("lossy").has_value());
}

TEST(RecordBlockTest, CorruptBlocksAreRejectedNotMisread) {
  RecordBlockBuilder builder;
  builder.Add("a", "meta-a", "data-a");
  builder.Add("b", "meta-b", "data-b");
  builder.Add("c", "meta-c", "data-c");
  const std::string good = builder.Finish();
  ASSERT_TRUE(RecordBlock::Parse(good).ok());

  // Every truncation fails cleanly.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(RecordBlock::Parse(std::string_view(good).substr(0, n)).ok()) << n;
  }
  // Every single-byte change either fails to parse or still satisfies every
  // invariant the accessors rely on (reading all entries stays in bounds).
  std::mt19937_64 rng(3);
  for (size_t pos = 0; pos < good.size(); ++pos) {
    for (int k = 0; k < 8; ++k) {
      std::string bad = good;
      bad[pos] = static_cast<char>(rng());
      auto block = RecordBlock::Parse(bad);
      if (!block.ok()) {
        EXPECT_EQ(block.status().code(), absl::StatusCode::kDataLoss);
        continue;
      }
      for (size_t i = 0; i < block->size(); ++i) {
        const auto e = block->at(i);
        EXPECT_GE(e.name.data(), bad.data());
        EXPECT_LE(e.data.data() + e.data.size(), bad.data() + bad.size());
      }
    }
  }
  // Names out of order are refused.
  RecordBlockBuilder unordered;
  unordered.Add("b", "", "");
  unordered.Add("a", "", "");
  auto parsed = RecordBlock::Parse(unordered.Finish());
  EXPECT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("out of order"), std::string::npos)
      << parsed.status();
}

}  // namespace
}  // namespace tensorkeep
