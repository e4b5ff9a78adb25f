// Test helpers for rules: an in-process collector on port 0 in a fresh
// temporary directory, records with given values, and running a built-in
// rule over a trial with InvokeRule.
#ifndef TENSORKEEP_TESTS_RULES_RULES_FIXTURE_H_
#define TENSORKEEP_TESTS_RULES_RULES_FIXTURE_H_

#include "tests/server/test_server.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/connection.h"
#include "client/trial.h"
#include "client/writer.h"
#include "gtest/gtest.h"
#include "rules/invoke_rule.h"
#include "rules/registry.h"
#include "server/collector_server.h"

namespace tensorkeep {
namespace rules_testing {

// A record of tensor `name` at global `step` holding `values` (float32 unless
// `dtype` says otherwise) with `shape` (default: 1-D).
struct RecordSpec {
  std::string name;
  uint64_t step = 0;
  std::vector<double> values;
  std::vector<int64_t> shape;  // empty: {values.size()}
  int mode = 1;                // TRAIN
  int64_t mode_step = -1;      // -1: the global step
  std::vector<std::string> collections;
  v1::DType dtype = v1::FLOAT32;
};

inline v1::TensorRecord MakeRecord(const RecordSpec& spec) {
  v1::TensorRecord r;
  r.set_name(spec.name);
  r.set_step(spec.step);
  r.set_mode(static_cast<v1::Mode>(spec.mode));
  r.set_mode_step(spec.mode_step < 0 ? spec.step : static_cast<uint64_t>(spec.mode_step));
  r.set_dtype(spec.dtype);
  if (spec.shape.empty()) {
    r.add_shape(static_cast<int64_t>(spec.values.size()));
  } else {
    for (int64_t d : spec.shape) r.add_shape(d);
  }
  std::string data;
  for (double v : spec.values) {
    if (spec.dtype == v1::FLOAT64) {
      data.append(reinterpret_cast<const char*>(&v), sizeof(v));
    } else if (spec.dtype == v1::INT64) {
      int64_t i = static_cast<int64_t>(v);
      data.append(reinterpret_cast<const char*>(&i), sizeof(i));
    } else {
      float f = static_cast<float>(v);
      data.append(reinterpret_cast<const char*>(&f), sizeof(f));
    }
  }
  r.set_data(std::move(data));
  r.set_has_value(true);
  for (const std::string& c : spec.collections) r.add_collections(c);
  return r;
}

// `n` copies of `v`.
inline std::vector<double> Fill(size_t n, double v) { return std::vector<double>(n, v); }

// `n` values lo, lo + (hi - lo) / (n - 1), ..., hi.
inline std::vector<double> Linspace(double lo, double hi, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = n == 1 ? lo : lo + (hi - lo) * i / (n - 1);
  return out;
}

// An in-process collector (testing::ServerFixture) plus rule helpers.
class RulesFixture : public testing::ServerFixture {
 protected:
  // Writes `records` to `trial` as one worker, ending each step after its
  // records (records must come in step order), then closes with end of
  // training, which ends the trial.
  void WriteTrial(const std::string& trial, const std::vector<RecordSpec>& records) {
    auto w = OpenWriter(trial);
    ASSERT_NE(w, nullptr);
    for (size_t i = 0; i < records.size(); ++i) {
      ASSERT_TRUE(w->Write(MakeRecord(records[i])).ok());
      if (i + 1 == records.size() || records[i + 1].step != records[i].step) {
        ASSERT_TRUE(w->EndStep(records[i].step).ok());
      }
    }
    ASSERT_TRUE(w->Close(/*end_of_training=*/true).ok());
  }

  // Creates built-in rule `rule` on `trial` and invokes it over the whole
  // (ended) trial, without raising. Fails the test on an error.
  rules::InvokeSummary Run(const std::string& rule,
                           const std::map<std::string, std::string>& params,
                           const std::string& trial, const std::vector<std::string>& others = {}) {
    std::vector<client::Trial> other_trials;
    for (const std::string& t : others) other_trials.push_back(TrialOf(t));
    auto r = rules::CreateRule(rule, params, TrialOf(trial), other_trials);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    rules::InvokeOptions options;
    options.wait_for_trial = false;
    auto summary = rules::InvokeRule(**r, options);
    EXPECT_TRUE(summary.ok()) << summary.status();
    if (!summary.ok()) return {};
    EXPECT_TRUE(summary->end_of_trial);
    return *summary;
  }

  // The step of the first issue, -1 if none.
  static int64_t FirstIssueStep(const rules::InvokeSummary& s) {
    if (!s.first_issue.has_value() || !s.first_issue->step.has_value()) return -1;
    return static_cast<int64_t>(*s.first_issue->step);
  }
};

}  // namespace rules_testing
}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_RULES_RULES_FIXTURE_H_
