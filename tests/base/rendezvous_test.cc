// Rendezvous hashing against the shared vectors (tests/data/rendezvous_vectors.txt,
// computed with coreutils' sha256sum, also checked by the Python suite), and
// the properties the cluster relies on.
#include "base/rendezvous.h"

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

struct Vectors {
  std::vector<std::tuple<std::string, std::string, std::string>> scores;  // collector, trial, hex
  std::vector<std::pair<std::string, std::vector<std::string>>> rankings;
};

Vectors ReadVectors() {
  Vectors v;
  std::ifstream in(TK_RENDEZVOUS_VECTORS);
  EXPECT_TRUE(in.good()) << TK_RENDEZVOUS_VECTORS;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string kind, a, b, c;
    fields >> kind >> a >> b;
    if (kind == "score") {
      fields >> c;
      v.scores.emplace_back(a, b, c);
    } else if (kind == "ranking") {
      v.rankings.emplace_back(a, absl::StrSplit(b, ','));
    } else {
      ADD_FAILURE() << "unknown line: " << line;
    }
  }
  return v;
}

std::string Hex(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

TEST(Rendezvous, ScoresMatchTheSharedVectors) {
  const Vectors v = ReadVectors();
  ASSERT_GE(v.scores.size(), 20u);
  for (const auto& [collector, trial, hex] : v.scores) {
    EXPECT_EQ(Hex(RendezvousScore(collector, trial)), hex) << collector << " " << trial;
  }
}

TEST(Rendezvous, RankingsMatchTheSharedVectors) {
  const Vectors v = ReadVectors();
  ASSERT_GE(v.rankings.size(), 4u);
  for (const auto& [trial, expected] : v.rankings) {
    std::vector<std::string> shuffled(expected.rbegin(), expected.rend());
    EXPECT_EQ(RendezvousRanking(shuffled, trial), expected) << trial;
    EXPECT_EQ(RendezvousOwner(shuffled, trial), expected.front()) << trial;
  }
}

std::vector<std::string> Collectors(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("collector-" + std::to_string(i) + ":7077");
  return out;
}

TEST(Rendezvous, AddingACollectorMovesOnlyTheTrialsItNowOwns) {
  const auto three = Collectors(3);
  const auto four = Collectors(4);
  int moved = 0;
  for (int t = 0; t < 4000; ++t) {
    const std::string trial = "trial-" + std::to_string(t);
    const std::string before = RendezvousOwner(three, trial);
    const std::string after = RendezvousOwner(four, trial);
    if (before != after) {
      ++moved;
      EXPECT_EQ(after, four.back()) << trial;
    }
    // The old owner comes right after the new one in the new ranking: the
    // walk finds an existing trial at its second step.
    const auto ranking = RendezvousRanking(four, trial);
    EXPECT_EQ(before, ranking[before == after ? 0 : 1]) << trial;
  }
  // About a quarter move (binomial: 1000 +- 27 for one sigma).
  EXPECT_GT(moved, 850);
  EXPECT_LT(moved, 1150);
}

TEST(Rendezvous, RemovingACollectorKeepsTheOthersOrder) {
  const auto four = Collectors(4);
  std::vector<std::string> three(four.begin(), four.begin() + 3);
  for (int t = 0; t < 500; ++t) {
    const std::string trial = "run-" + std::to_string(t);
    auto ranking = RendezvousRanking(four, trial);
    ranking.erase(std::find(ranking.begin(), ranking.end(), four.back()));
    EXPECT_EQ(RendezvousRanking(three, trial), ranking);
  }
}

TEST(Rendezvous, SpreadsTrialsEvenly) {
  const auto four = Collectors(4);
  std::map<std::string, int> count;
  for (int t = 0; t < 8000; ++t) ++count[RendezvousOwner(four, "job-" + std::to_string(t))];
  ASSERT_EQ(count.size(), 4u);
  for (const auto& [c, n] : count) {
    EXPECT_GT(n, 1800) << c;  // 2000 expected, sigma ~39
    EXPECT_LT(n, 2200) << c;
  }
}

TEST(Rendezvous, EmptyListHasNoOwner) {
  EXPECT_EQ(RendezvousOwner({}, "t"), "");
  EXPECT_TRUE(RendezvousRanking({}, "t").empty());
}

}  // namespace
}  // namespace tensorkeep
