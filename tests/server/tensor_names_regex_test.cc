// Trial::TensorNames with client regexes: RE2 (linear time, no recursion on
// the pattern), clear BAD_REQUEST for what RE2 refuses, Python re.search
// semantics, and matching outside the trial's lock.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/trial.h"
#include "server/validation.h"

namespace tensorkeep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Clock = std::chrono::steady_clock;

// An update that saves `names` at TRAIN step `step` from worker_0.
TrialUpdate Saved(const std::vector<std::string>& names, uint64_t step = 0) {
  TrialUpdate u;
  u.worker = "worker_0";
  u.num_workers = 1;
  for (const std::string& n : names) u.records.push_back(IndexedRecord{n, step, 1, step, {}});
  u.committed_through = static_cast<int64_t>(step);
  return u;
}

absl::StatusOr<std::vector<std::string>> Names(const Trial& t, std::vector<std::string> regex) {
  return t.TensorNames(std::nullopt, kModeGlobal, regex, "");
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class TensorNamesRegexTest : public ::testing::Test {
 protected:
  void ExpectBadRequest(const std::vector<std::string>& regex, const std::string& message_part) {
    auto r = Names(trial_, regex);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(GetReason(r.status()), Reason::kBadRequest) << r.status();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(message_part));
    // The message quotes at most ~100 bytes of the pattern.
    EXPECT_LT(r.status().message().size(), 600u) << r.status().message().substr(0, 600);
  }

  Trial trial_{"t"};
};

TEST_F(TensorNamesRegexTest, CatastrophicBacktrackingPatternAnswersAtOnce) {
  // std::regex took minutes on `(a+)+$` against 36 a's and a '!'.
  const std::vector<std::string> names = {std::string(36, 'a') + "!", std::string(36, 'a'),
                                          "b" + std::string(40, 'a'), "a!a!a!"};
  trial_.Apply(Saved(names));
  const auto start = Clock::now();
  auto r = Names(trial_, {"(a+)+$"});
  const double seconds = SecondsSince(start);
  ASSERT_TRUE(r.ok()) << r.status();
  // Independently: a name matches `(a+)+$` (search) exactly when it ends in 'a'.
  std::vector<std::string> expected;
  for (const std::string& n : names) {
    if (!n.empty() && n.back() == 'a') expected.push_back(n);
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(*r, expected);
  EXPECT_LT(seconds, 0.5);
}

TEST_F(TensorNamesRegexTest, DeeplyNestedPatternIsRefusedNotACrash) {
  trial_.Apply(Saved({"a", "b"}));
  // 40 kB of nesting overflowed std::regex's recursive compiler.
  const std::string deep = std::string(20000, '(') + "a" + std::string(20000, ')');
  ExpectBadRequest({deep}, "too long");
  ExpectBadRequest({deep}, absl::StrCat("limit is ", kMaxRegexBytes));
  // Nesting within the length limit compiles (or is refused cleanly) and matches right.
  const size_t depth = (kMaxRegexBytes - 1) / 2;
  const std::string nested = std::string(depth, '(') + "a" + std::string(depth, ')');
  auto r = Names(trial_, {nested});
  if (r.ok()) {
    EXPECT_THAT(*r, ElementsAre("a"));
  } else {
    EXPECT_EQ(GetReason(r.status()), Reason::kBadRequest) << r.status();
  }
}

TEST_F(TensorNamesRegexTest, UnsupportedConstructsAreBadRequestsThatSaySo) {
  trial_.Apply(Saved({"aa"}));
  ExpectBadRequest({"(a)\\1"}, "backreferences are not supported");
  ExpectBadRequest({"(?P<x>a)(?P=x)"}, "backreferences are not supported");
  ExpectBadRequest({"a(?=a)"}, "lookahead and lookbehind are not supported");
  ExpectBadRequest({"(?<!b)a"}, "lookahead and lookbehind are not supported");
  ExpectBadRequest({"fc[1"}, "invalid regex 'fc[1'");
  ExpectBadRequest({"fine", "(unclosed"}, "missing )");
}

TEST_F(TensorNamesRegexTest, TooManyOrTooLongRegexesAreRefused) {
  trial_.Apply(Saved({"a"}));
  ExpectBadRequest(std::vector<std::string>(kMaxRegexes + 1, "a"),
                   absl::StrCat("limit is ", kMaxRegexes));
  EXPECT_TRUE(Names(trial_, std::vector<std::string>(kMaxRegexes, "a")).ok());
  ExpectBadRequest({std::string(kMaxRegexBytes + 1, 'x')},
                   absl::StrCat("(", kMaxRegexBytes + 1, " bytes) is too long"));
  EXPECT_TRUE(Names(trial_, {std::string(kMaxRegexBytes, 'x')}).ok());
}

TEST_F(TensorNamesRegexTest, MatchesAnywhereAndOrsSeveralRegexes) {
  trial_.Apply(Saved({"Net_fc1.weight", "Net_fc2.weight", "gradient/Net_fc1.weight",
                      "gradient/Net_fc2.bias", "CrossEntropyLoss_output_0"}));
  auto r = Names(trial_, {"fc1"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("Net_fc1.weight", "gradient/Net_fc1.weight"));
  r = Names(trial_, {"^gradient/"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("gradient/Net_fc1.weight", "gradient/Net_fc2.bias"));
  r = Names(trial_, {"bias$", "Loss", "nothing"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("CrossEntropyLoss_output_0", "gradient/Net_fc2.bias"));
  r = Names(trial_, {"^fc1"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, IsEmpty());
  // The step filter still applies with a regex.
  trial_.Apply(Saved({"Net_fc1.weight"}, 1));
  r = trial_.TensorNames(1, kModeGlobal, {"weight"}, "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("Net_fc1.weight"));
}

TEST_F(TensorNamesRegexTest, MatchingDoesNotHoldTheTrialLock) {
  // 100,000 names of 200 bytes and the most regexes a request may carry,
  // none matching, each one whose DFA outgrows its memory budget (it must
  // remember the last 14 bytes): RE2 stays linear but takes a while here.
  // The names applied meanwhile match.
  constexpr int kNames = 100000;
  std::vector<std::string> names;
  names.reserve(kNames);
  uint32_t x = 12345;
  for (int i = 0; i < kNames; ++i) {
    std::string n = absl::StrCat("n", i, "_");
    while (n.size() < 200) {
      x = x * 1103515245u + 12345u;
      n.push_back((x >> 16) & 1 ? 'a' : 'b');
    }
    names.push_back(std::move(n));
  }
  trial_.Apply(Saved(names));
  const std::vector<std::string> regex(kMaxRegexes, "a[ab]{12}c$");

  std::atomic<bool> done{false};
  absl::StatusOr<std::vector<std::string>> result;
  Clock::time_point query_start, query_end;
  std::thread query([&] {
    query_start = Clock::now();
    result = Names(trial_, regex);
    query_end = Clock::now();
    done = true;
  });
  // Apply updates (each a new matching name, at a new step) until the query returns,
  // noting when each completed. One the query does not list was applied after
  // it had listed the names. If the lock were held through the match, the
  // first such update would complete only at the end of the query; here it
  // completes at its start, while the regexes run.
  std::vector<std::pair<std::string, Clock::time_point>> applied;
  for (uint64_t step = 1; !done; ++step) {
    std::string name = absl::StrCat("late_", step, "_", std::string(13, 'a'), "c");
    trial_.Apply(Saved({name}, step));
    applied.emplace_back(std::move(name), Clock::now());
  }
  query.join();
  ASSERT_TRUE(result.ok()) << result.status();
  const double query_seconds = std::chrono::duration<double>(query_end - query_start).count();
  int unseen = 0;
  double first_unseen = -1;  // seconds after the query started
  for (const auto& [name, at] : applied) {
    if (at >= query_end) break;
    if (std::binary_search(result->begin(), result->end(), name)) continue;
    ++unseen;
    if (first_unseen < 0) first_unseen = std::chrono::duration<double>(at - query_start).count();
  }
  std::printf(
      "TensorNames over %d names with %zu regexes took %.3f s; %d updates were applied "
      "meanwhile, the first %.3f s after it started\n",
      kNames, regex.size(), query_seconds, unseen, first_unseen);
  EXPECT_GE(unseen, 5);
  EXPECT_GE(first_unseen, 0);
  EXPECT_LT(first_unseen, query_seconds / 2);
}

}  // namespace
}  // namespace tensorkeep
