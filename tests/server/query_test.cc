// Every query of the service against an in-process collector, with values
// compared against independent computations in this file.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "base/errors.h"
#include "gmock/gmock.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;
using testing::AsFloats;
using testing::Float32Record;

class QueryTest : public testing::ServerFixture {
 protected:
  // Trial "mlp": TRAIN global steps 0,2,4 (mode steps 0,1,2), EVAL global 5
  // (mode step 0), TRAIN 6 (mode step 3). "w" every step, "loss" on TRAIN
  // steps as reductions only, "g" on steps 2 and 6.
  void WriteMlp() {
    auto w = OpenWriter("mlp");
    const std::vector<std::tuple<uint64_t, int, uint64_t>> steps = {
        {0, 1, 0}, {2, 1, 1}, {4, 1, 2}, {5, 2, 0}, {6, 1, 3}};
    for (const auto& [g, mode, ms] : steps) {
      auto r = Float32Record("w", g, 64, static_cast<uint32_t>(g), mode, ms);
      r.add_collections("weights");
      ASSERT_TRUE(w->Write(r).ok());
      if (mode == 1) {
        v1::TensorRecord loss;
        loss.set_name("loss");
        loss.set_step(g);
        loss.set_mode(v1::TRAIN);
        loss.set_mode_step(ms);
        loss.set_has_value(false);
        auto* red = loss.add_reductions();
        red->set_name("mean");
        red->set_value(10.0 - g);
        loss.add_collections("losses");
        ASSERT_TRUE(w->Write(loss).ok());
      }
      if (g == 2 || g == 6) {
        auto r2 = Float32Record("g", g, 1000, 100 + static_cast<uint32_t>(g), mode, ms);
        r2.add_collections("gradients");
        ASSERT_TRUE(w->Write(r2).ok());
      }
      ASSERT_TRUE(w->EndStep(g).ok());
    }
    ASSERT_TRUE(w->Flush().ok());
    ASSERT_TRUE(w->Close(/*end_of_training=*/false).ok());
  }
};

TEST_F(QueryTest, StepsModesAndMappings) {
  WriteMlp();
  auto t = TrialOf("mlp");
  EXPECT_THAT(*t.Steps(), ElementsAre(0, 2, 4, 5, 6));
  EXPECT_THAT(*t.Steps(client::kTrain), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(*t.Steps(client::kEval), ElementsAre(0));
  EXPECT_THAT(*t.Modes(), ElementsAre(1, 2));
  EXPECT_EQ(*t.ModeOf(5), client::kEval);
  EXPECT_EQ(*t.ModeStep(6), 3u);
  EXPECT_EQ(*t.GlobalStep(client::kTrain, 2), 4u);
  EXPECT_EQ(*t.GlobalStep(client::kEval, 0), 5u);
  EXPECT_EQ(GetReason(t.ModeOf(3).status()), Reason::kStepUnavailable);
  EXPECT_EQ(GetReason(t.ModeOf(7).status()), Reason::kStepNotYetAvailable);
  EXPECT_THAT(*t.tensor("g").Steps(), ElementsAre(2, 6));
  EXPECT_THAT(*t.tensor("g").Steps(client::kTrain), ElementsAre(1, 3));
  EXPECT_THAT(*t.Workers(), ElementsAre("worker_0"));
}

TEST_F(QueryTest, StepsArrivingOutOfOrderAreListedInOrderAndByRange) {
  // Two workers: worker_1 saves the even steps first, worker_0 the odd ones
  // after, so every odd step is new and lower than the highest known.
  {
    auto w1 = OpenWriter("late", "worker_1", 2);
    for (uint64_t s : {0, 2, 4, 6}) ASSERT_TRUE(w1->Write(Float32Record("x", s, 4, 1, 4, s)).ok());
    ASSERT_TRUE(w1->EndStep(7).ok());
    ASSERT_TRUE(w1->Flush().ok());
    auto w0 = OpenWriter("late", "worker_0", 2);
    for (uint64_t s : {5, 1, 3}) ASSERT_TRUE(w0->Write(Float32Record("y", s, 4, 1, 4, s)).ok());
    ASSERT_TRUE(w0->Flush().ok());
    auto t = TrialOf("late");
    // worker_0 committed nothing yet: no step is complete, all are visible
    // as incomplete (some worker committed through 7).
    EXPECT_THAT(*t.Steps(), ElementsAre());
    EXPECT_THAT(*t.Steps(client::kGlobal, /*show_incomplete_steps=*/true),
                ElementsAre(0, 1, 2, 3, 4, 5, 6));
    ASSERT_TRUE(w0->EndStep(3).ok());
    ASSERT_TRUE(w0->Flush().ok());
    EXPECT_THAT(*t.Steps(), ElementsAre(0, 1, 2, 3));
    ASSERT_TRUE(w0->Close(true).ok());
    ASSERT_TRUE(w1->Close(true).ok());
  }
  auto t = TrialOf("late");
  EXPECT_THAT(*t.Steps(), ElementsAre(0, 1, 2, 3, 4, 5, 6));
  Restart();
  t = TrialOf("late");
  EXPECT_THAT(*t.Steps(), ElementsAre(0, 1, 2, 3, 4, 5, 6)) << "rebuilt from the store";
}

TEST_F(QueryTest, TensorNamesFilterByStepModeRegexAndCollection) {
  WriteMlp();
  auto t = TrialOf("mlp");
  EXPECT_THAT(*t.TensorNames(), ElementsAre("g", "loss", "w"));
  EXPECT_THAT(*t.TensorNames(2), ElementsAre("g", "loss", "w"));
  EXPECT_THAT(*t.TensorNames(0, client::kEval), ElementsAre("w"));
  EXPECT_THAT(*t.TensorNames(std::nullopt, client::kEval), ElementsAre("w"));
  EXPECT_THAT(*t.TensorNames(std::nullopt, client::kGlobal, {"l"}), ElementsAre("loss"));
  // smdebug matches with re.search: anywhere in the name, unless anchored.
  EXPECT_THAT(*t.TensorNames(std::nullopt, client::kGlobal, {"oss"}), ElementsAre("loss"));
  EXPECT_THAT(*t.TensorNames(std::nullopt, client::kGlobal, {"^oss"}), ElementsAre());
  EXPECT_THAT(*t.TensorNames(std::nullopt, client::kGlobal, {".*s+", "^w$"}),
              ElementsAre("loss", "w"));
  EXPECT_THAT(*t.TensorNames(std::nullopt, client::kGlobal, {}, "gradients"), ElementsAre("g"));
  auto both = t.TensorNames(std::nullopt, client::kGlobal, {"w"}, "weights");
  EXPECT_EQ(GetReason(both.status()), Reason::kBadRequest);
  auto bad_regex = t.TensorNames(std::nullopt, client::kGlobal, {"(unclosed"});
  EXPECT_EQ(GetReason(bad_regex.status()), Reason::kBadRequest);
  EXPECT_TRUE(*t.HasTensor("loss"));
  EXPECT_FALSE(*t.HasTensor("nope"));
  auto collections = *t.Collections();
  EXPECT_THAT(collections["losses"], ElementsAre("loss"));
  EXPECT_THAT(collections["weights"], ElementsAre("w"));
}

TEST_F(QueryTest, ValueRoundTripsExactlyAndValuesStreamsEveryStep) {
  WriteMlp();
  auto t = TrialOf("mlp");
  auto v = t.tensor("w").GetValue(1, client::kTrain);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->step, 2u);
  EXPECT_EQ(v->data, Float32Record("w", 2, 64, 2).data());
  EXPECT_THAT(v->shape, ElementsAre(64));
  auto all = t.tensor("w").Values();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 5u);
  for (const auto& [step, value] : *all) {
    EXPECT_EQ(value.data, Float32Record("w", step, 64, static_cast<uint32_t>(step)).data())
        << "step " << step;
  }
  auto train = t.tensor("w").Values(client::kTrain);
  ASSERT_TRUE(train.ok());
  std::vector<uint64_t> keys;
  for (const auto& [k, v2] : *train) keys.push_back(k);
  EXPECT_THAT(keys, ElementsAre(0, 1, 2, 3));
}

TEST_F(QueryTest, ReductionsMatchAnIndependentComputation) {
  WriteMlp();
  auto t = TrialOf("mlp");
  const std::vector<float> x = AsFloats(Float32Record("g", 6, 1000, 106).data());
  long double sum = 0, asum = 0, sq = 0, prod = 1, aprod = 1;
  double mn = x[0], mx = x[0], amn = std::fabs(x[0]), amx = std::fabs(x[0]);
  for (float f : x) {
    sum += f;
    asum += std::fabs(f);
    sq += static_cast<long double>(f) * f;
    prod *= f;
    aprod *= std::fabs(f);
    mn = std::min<double>(mn, f);
    mx = std::max<double>(mx, f);
    amn = std::min<double>(amn, std::fabs(f));
    amx = std::max<double>(amx, std::fabs(f));
  }
  const long double mean = sum / x.size();
  long double var = 0, avar = 0;
  const long double amean = asum / x.size();
  for (float f : x) {
    var += (f - mean) * (f - mean);
    avar += (std::fabs(f) - amean) * (std::fabs(f) - amean);
  }
  var /= x.size();
  avar /= x.size();
  const std::map<std::pair<std::string, bool>, double> expected = {
      {{"min", false}, mn},       {{"max", false}, mx},
      {{"mean", false}, static_cast<double>(mean)},
      {{"std", false}, static_cast<double>(std::sqrt(var))},
      {{"variance", false}, static_cast<double>(var)},
      {{"sum", false}, static_cast<double>(sum)},
      {{"prod", false}, static_cast<double>(prod)},
      {{"l1", false}, static_cast<double>(asum)},
      {{"l2", false}, static_cast<double>(std::sqrt(sq))},
      {{"min", true}, amn},       {{"max", true}, amx},
      {{"mean", true}, static_cast<double>(amean)},
      {{"variance", true}, static_cast<double>(avar)},
      {{"sum", true}, static_cast<double>(asum)},
      {{"prod", true}, static_cast<double>(aprod)},
  };
  std::vector<std::pair<std::string, bool>> specs;
  for (const auto& [k, v] : expected) specs.push_back(k);
  auto got = t.tensor("g").ReductionValues(6, specs);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < specs.size(); ++i) {
    const double e = expected.at(specs[i]);
    EXPECT_NEAR((*got)[i], e, 1e-9 * std::max(1.0, std::fabs(e)))
        << specs[i].first << (specs[i].second ? " abs" : "");
  }
  auto one = t.tensor("g").ReductionValue(3, "l2", client::kTrain);
  ASSERT_TRUE(one.ok());
  EXPECT_NEAR(*one, static_cast<double>(std::sqrt(sq)), 1e-9 * std::sqrt(static_cast<double>(sq)));
  EXPECT_EQ(GetReason(t.tensor("g").ReductionValue(6, "median").status()), Reason::kBadRequest);
}

TEST_F(QueryTest, SavedReductionsWinAndReductionOnlyRecordsHaveNoValue) {
  WriteMlp();
  auto loss = TrialOf("mlp").tensor("loss");
  EXPECT_DOUBLE_EQ(*loss.ReductionValue(4, "mean"), 6.0);
  auto saved = loss.SavedReductions(4);
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->size(), 1u);
  EXPECT_DOUBLE_EQ((saved->at({"mean", false})), 6.0);
  EXPECT_EQ(GetReason(loss.GetValue(4).status()), Reason::kTensorUnavailableForStep);
  EXPECT_EQ(GetReason(loss.ReductionValue(4, "max").status()), Reason::kTensorUnavailableForStep);
  EXPECT_EQ(GetReason(loss.GetHistogram(4).status()), Reason::kTensorUnavailableForStep);
}

TEST_F(QueryTest, HistogramMatchesAnIndependentCount) {
  WriteMlp();
  const std::vector<float> x = AsFloats(Float32Record("g", 2, 1000, 102).data());
  auto h = TrialOf("mlp").tensor("g").GetHistogram(2, 10, std::make_pair(-2.0, 3.0));
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->edges.size(), 11u);
  std::vector<uint64_t> counts(10, 0);
  uint64_t outside = 0;
  for (float f : x) {
    if (f < -2.0 || f > 3.0) {
      ++outside;
      continue;
    }
    int bin = static_cast<int>((f + 2.0) / 0.5);
    counts[std::min(bin, 9)]++;
  }
  EXPECT_EQ(h->counts, counts);
  EXPECT_EQ(h->outside_count, outside);
  auto whole = TrialOf("mlp").tensor("g").GetHistogram(2, 7);
  ASSERT_TRUE(whole.ok());
  EXPECT_DOUBLE_EQ(whole->edges.front(), *std::min_element(x.begin(), x.end()));
  EXPECT_DOUBLE_EQ(whole->edges.back(), *std::max_element(x.begin(), x.end()));
  EXPECT_EQ(std::accumulate(whole->counts.begin(), whole->counts.end(), uint64_t{0}), 1000u);
}

TEST_F(QueryTest, PrevStepsAndWorkers) {
  WriteMlp();
  auto w = TrialOf("mlp").tensor("w");
  EXPECT_THAT(*w.PrevSteps(5, 2), ElementsAre(4, 5));
  EXPECT_THAT(*w.PrevSteps(3, 10), ElementsAre(0, 2));
  EXPECT_THAT(*w.PrevSteps(2, 2, client::kTrain), ElementsAre(1, 2));
  EXPECT_THAT(*w.Workers(4), ElementsAre("worker_0"));
}

TEST_F(QueryTest, SmdebugExceptionsInSmdebugSituations) {
  WriteMlp();
  auto t = TrialOf("mlp");
  EXPECT_EQ(GetReason(t.tensor("nope").GetValue(0).status()), Reason::kTensorUnavailable);
  EXPECT_EQ(GetReason(t.tensor("g").GetValue(4).status()), Reason::kTensorUnavailableForStep);
  EXPECT_EQ(GetReason(t.tensor("w").GetValue(3).status()), Reason::kStepUnavailable);
  EXPECT_EQ(GetReason(t.tensor("w").GetValue(100).status()), Reason::kStepNotYetAvailable);
  EXPECT_EQ(GetReason(t.tensor("w").GetValue(0, client::kGlobal, "worker_7").status()),
            Reason::kInvalidWorker);
  EXPECT_EQ(GetReason(TrialOf("other").Steps().status()), Reason::kTrialNotFound);
  auto bad = TrialOf("bad name!").Steps();
  EXPECT_EQ(GetReason(bad.status()), Reason::kBadRequest);
  ASSERT_TRUE(t.End().ok());
  // After the end a step beyond the last is UNAVAILABLE (smdebug), and
  // waiting for it answers NoMoreData at once.
  EXPECT_EQ(*t.HasPassedStep(100), client::StepState::kUnavailable);
  EXPECT_EQ(GetReason(t.tensor("w").GetValue(100).status()), Reason::kStepUnavailable);
  EXPECT_EQ(GetReason(t.WaitForSteps({100})), Reason::kNoMoreData);
}

TEST_F(QueryTest, EveryDtypeRoundTrips) {
  auto w = OpenWriter("dtypes");
  const std::vector<std::pair<v1::DType, int>> dtypes = {
      {v1::FLOAT16, 2}, {v1::FLOAT32, 4}, {v1::FLOAT64, 8}, {v1::INT8, 1}, {v1::INT16, 2},
      {v1::INT32, 4},   {v1::INT64, 8},   {v1::UINT8, 1},   {v1::BOOL, 1},
      {v1::BFLOAT16, 2}};
  std::mt19937 rng(7);
  std::map<std::string, std::string> sent;
  for (const auto& [dt, size] : dtypes) {
    v1::TensorRecord r;
    r.set_name(v1::DType_Name(dt));
    r.set_step(0);
    r.set_mode(v1::TRAIN);
    r.set_dtype(dt);
    r.add_shape(2);
    r.add_shape(3);
    r.set_has_value(true);
    std::string data(6 * size, '\0');
    for (char& c : data) c = static_cast<char>(dt == v1::BOOL ? rng() % 2 : rng() % 120);
    r.set_data(data);
    sent[r.name()] = data;
    ASSERT_TRUE(w->Write(r).ok());
  }
  v1::TensorRecord scalar = Float32Record("scalar", 0, 1, 3);
  scalar.clear_shape();
  ASSERT_TRUE(w->Write(scalar).ok());
  v1::TensorRecord empty = Float32Record("empty", 0, 0, 3);
  ASSERT_TRUE(w->Write(empty).ok());
  ASSERT_TRUE(w->Close(true).ok());
  auto t = TrialOf("dtypes");
  for (const auto& [dt, size] : dtypes) {
    auto v = t.tensor(v1::DType_Name(dt)).GetValue(0);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->dtype, dt);
    EXPECT_THAT(v->shape, ElementsAre(2, 3));
    EXPECT_EQ(v->data, sent[v1::DType_Name(dt)]);
  }
  auto s = t.tensor("scalar").GetValue(0);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->data, scalar.data());
  auto e = t.tensor("empty").GetValue(0);
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->shape, ElementsAre(0));
  EXPECT_TRUE(e->data.empty());
}

TEST_F(QueryTest, TensorsLargerThanAChunkRoundTrip) {
  auto w = OpenWriter("big");
  // 24 MiB: several 4 MiB chunks each way, beyond gRPC's 4 MiB default.
  auto r = Float32Record("big", 0, 6 << 20, 5);
  ASSERT_TRUE(w->Write(r).ok());
  ASSERT_TRUE(w->Close(true).ok());
  auto v = TrialOf("big").tensor("big").GetValue(0);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->data.size(), r.data().size());
  EXPECT_TRUE(v->data == r.data());
  auto mean = TrialOf("big").tensor("big").ReductionValue(0, "mean");
  ASSERT_TRUE(mean.ok());
  EXPECT_NEAR(*mean, 0.5, 0.01);
}

TEST_F(QueryTest, ListingTrialsShowsState) {
  WriteMlp();
  auto s = TrialOf("mlp").Summary();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->num_steps(), 5u);
  EXPECT_EQ(s->last_step(), 6);
  EXPECT_EQ(s->num_tensors(), 3u);
  EXPECT_FALSE(s->ended());
}

}  // namespace
}  // namespace tensorkeep
