// The pure pieces behind the HTTP port: the min/max envelope, per-step
// distributions (percentiles, rebinning), the JSON writer and the Prometheus
// text writer, against values computed here by hand or by brute force.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/http/json_writer.h"
#include "server/metrics/prometheus_text.h"
#include "server/views/downsample.h"
#include "server/views/step_distribution.h"
#include "tests/server/prometheus_parse.h"

namespace tensorkeep {
namespace {

TEST(MinMaxEnvelope, FullResolutionUpToMaxBuckets) {
  std::vector<SeriesPoint> p = {{0, 1}, {5, -2}, {7, 3}};
  auto b = MinMaxEnvelope(p, 3);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b[i].first_step, p[i].step);
    EXPECT_EQ(b[i].last_step, p[i].step);
    EXPECT_EQ(b[i].min, p[i].value);
    EXPECT_EQ(b[i].max, p[i].value);
    EXPECT_EQ(b[i].mean, p[i].value);
  }
}

TEST(MinMaxEnvelope, EveryBucketKeepsItsExtremesAndEveryPointIsInOne) {
  std::mt19937 rng(7);
  std::normal_distribution<double> dist;
  std::vector<SeriesPoint> p;
  for (uint64_t s = 0; s < 1003; ++s) p.push_back({s * 3, dist(rng)});
  p[517].value = 1e6;   // a spike
  p[900].value = -1e6;  // and a dip
  auto b = MinMaxEnvelope(p, 10);
  ASSERT_EQ(b.size(), 10u);  // ceil(1003 / 10) = 101 a bucket: 10 buckets
  size_t next = 0;
  for (const auto& bucket : b) {
    // Brute force over the points the bucket claims.
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    size_t n = 0;
    EXPECT_EQ(bucket.first_step, p[next].step);
    while (next < p.size() && p[next].step <= bucket.last_step) {
      lo = std::min(lo, p[next].value);
      hi = std::max(hi, p[next].value);
      sum += p[next].value;
      ++n;
      ++next;
    }
    EXPECT_EQ(n, bucket.count);
    EXPECT_EQ(bucket.min, lo);
    EXPECT_EQ(bucket.max, hi);
    EXPECT_NEAR(bucket.mean, sum / n, 1e-9);
  }
  EXPECT_EQ(next, p.size());
  EXPECT_EQ(b[5].max, 1e6);
  EXPECT_EQ(b[5].max_step, 517u * 3);
  EXPECT_EQ(b[8].min, -1e6);
  EXPECT_EQ(b[8].min_step, 900u * 3);
}

TEST(MinMaxEnvelope, NanIsSkippedAndAllNanIsNan) {
  std::vector<SeriesPoint> p = {{0, NAN}, {1, 2}, {2, NAN}, {3, NAN}};
  auto b = MinMaxEnvelope(p, 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].min, 2);
  EXPECT_EQ(b[0].max, 2);
  EXPECT_EQ(b[0].mean, 2);
  EXPECT_TRUE(std::isnan(b[1].min) && std::isnan(b[1].max) && std::isnan(b[1].mean));
  EXPECT_TRUE(MinMaxEnvelope({}, 5).empty());
}

absl::Span<const char> Bytes(const std::vector<float>& v) {
  return absl::Span<const char>(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(StepDistribution, ExactExtremesAndPercentilesWithinABin) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(1, 3);
  std::vector<float> v(20000);
  for (float& x : v) x = dist(rng);
  v[10] = NAN;
  v[11] = INFINITY;
  auto d = ComputeStepDistribution(DType::kFloat32, Bytes(v));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->nan_count, 1u);
  EXPECT_EQ(d->inf_count, 1u);
  EXPECT_EQ(d->count, v.size() - 2);
  std::vector<double> finite;
  for (float x : v) {
    if (std::isfinite(x)) finite.push_back(x);
  }
  std::sort(finite.begin(), finite.end());
  EXPECT_EQ(Percentile(*d, 0), finite.front());
  EXPECT_EQ(Percentile(*d, 100), finite.back());
  const double width = (finite.back() - finite.front()) / StepDistribution::kFineBins;
  for (double p : {1.0, 6.68, 15.87, 50.0, 84.13, 99.0}) {
    const double rank = p / 100 * (finite.size() - 1);
    const double lower = finite[static_cast<size_t>(std::floor(rank))];
    const double upper = finite[static_cast<size_t>(std::ceil(rank))];
    const double got = Percentile(*d, p);
    EXPECT_GE(got, lower - width) << p;
    EXPECT_LE(got, upper + width) << p;
  }
}

// Workers' distributions of one step merged ("all workers"): counts add up,
// the extremes are exact, and percentiles are those of the union of the
// values (sorted here) within one of the parts' fine bins, also with a part
// that holds one value only.
TEST(StepDistribution, MergeIsTheUnionsDistribution) {
  std::mt19937 rng(5);
  std::normal_distribution<float> narrow(0, 1), wide(3, 10);
  std::vector<float> a(5000), b(12000), c(300, 7.25f);
  for (float& x : a) x = narrow(rng);
  for (float& x : b) x = wide(rng);
  b[0] = NAN;
  auto da = ComputeStepDistribution(DType::kFloat32, Bytes(a));
  auto db = ComputeStepDistribution(DType::kFloat32, Bytes(b));
  auto dc = ComputeStepDistribution(DType::kFloat32, Bytes(c));
  ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
  const StepDistribution* parts[] = {&*da, nullptr, &*db, &*dc};
  const StepDistribution m = MergeStepDistributions(parts);
  std::vector<double> all;
  for (const auto* v : {&a, &b, &c}) {
    for (float x : *v) {
      if (std::isfinite(x)) all.push_back(x);
    }
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(m.count, all.size());
  EXPECT_EQ(m.nan_count, 1u);
  EXPECT_EQ(m.min, all.front());
  EXPECT_EQ(m.max, all.back());
  EXPECT_NEAR(std::accumulate(m.counts.begin(), m.counts.end(), 0.0), all.size(), 1e-6);
  EXPECT_EQ(Percentile(m, 0), all.front());
  EXPECT_EQ(Percentile(m, 100), all.back());
  const double width = std::max((da->max - da->min), (db->max - db->min)) /
                       StepDistribution::kFineBins;
  for (double p : {1.0, 6.68, 15.87, 30.85, 50.0, 69.15, 84.13, 93.32, 99.0}) {
    const double rank = p / 100 * (all.size() - 1);
    const double lower = all[static_cast<size_t>(std::floor(rank))];
    const double upper = all[static_cast<size_t>(std::ceil(rank))];
    const double got = Percentile(m, p);
    EXPECT_GE(got, lower - width) << p;
    EXPECT_LE(got, upper + width) << p;
  }
  // The constant part sits at its value: the shared-range histogram of the
  // merge is the sum of the parts' (Rebin is linear).
  const std::vector<double> edges = {-40, -5, 0, 7, 7.5, 50};
  const auto rm = Rebin(m, edges);
  std::vector<double> sum(edges.size() - 1, 0.0);
  for (const auto* d : {&*da, &*db, &*dc}) {
    const auto r = Rebin(*d, edges);
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += r[k];
  }
  for (size_t k = 0; k < sum.size(); ++k) EXPECT_NEAR(rm[k], sum[k], 1e-6 * all.size()) << k;
  // One part alone merges to itself.
  const StepDistribution* one[] = {&*da};
  const StepDistribution same = MergeStepDistributions(one);
  for (double p : {6.68, 50.0, 93.32}) EXPECT_DOUBLE_EQ(Percentile(same, p), Percentile(*da, p));
  // Only constant parts, and nothing.
  const StepDistribution* consts[] = {&*dc, &*dc};
  EXPECT_EQ(Percentile(MergeStepDistributions(consts), 50), 7.25);
  EXPECT_EQ(MergeStepDistributions({}).count, 0u);
}

// The fast paths (float32 four at a time, float64) against a plain count:
// every finite value in the fine bin its offset gives (or a neighbour, at an
// edge, an ulp away), NaN and both infinities counted apart, exact extremes,
// with a length that is not a multiple of 4 and the non-finite values in the
// vector part and in its tail.
template <typename T>
void CheckAgainstPlainCount(DType dtype, bool nonfinite) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> dist(-3, 5);
  std::vector<T> v(4099);
  for (T& x : v) x = static_cast<T>(dist(rng));
  const size_t special = nonfinite ? 4 : 0;
  if (nonfinite) {  // (without them the bins are counted four at a time)
    v[5] = std::numeric_limits<T>::quiet_NaN();
    v[6] = -std::numeric_limits<T>::infinity();
    v[4098] = std::numeric_limits<T>::infinity();
    v[4097] = std::numeric_limits<T>::quiet_NaN();
  }
  v[100] = static_cast<T>(-7.5);  // the finite min, next to -inf's block
  v[4096] = static_cast<T>(9.25);  // the finite max, in the tail
  auto d = ComputeStepDistribution(dtype, absl::Span<const char>(
                                              reinterpret_cast<const char*>(v.data()),
                                              v.size() * sizeof(T)));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->nan_count, special / 2);
  EXPECT_EQ(d->inf_count, special / 2);
  EXPECT_EQ(d->count, v.size() - special);
  EXPECT_EQ(d->min, -7.5);
  EXPECT_EQ(d->max, 9.25);
  ASSERT_EQ(d->counts.size(), static_cast<size_t>(StepDistribution::kFineBins));
  std::vector<double> plain(d->counts.size(), 0);
  const double width = (9.25 - -7.5) / StepDistribution::kFineBins;
  for (T x : v) {
    if (!std::isfinite(x)) continue;
    const int b = std::min(static_cast<int>((x - -7.5) / width), StepDistribution::kFineBins - 1);
    plain[b] += 1;
  }
  double total = 0, moved = 0;
  for (size_t b = 0; b < plain.size(); ++b) {
    total += d->counts[b];
    moved += std::abs(d->counts[b] - plain[b]);
  }
  EXPECT_EQ(total, static_cast<double>(d->count));
  EXPECT_LE(moved, 4) << "values counted in another bin than their offset's (beyond ulps)";
}

TEST(StepDistribution, FastPathsCountLikeAPlainLoop) {
  for (bool nonfinite : {true, false}) {
    CheckAgainstPlainCount<float>(DType::kFloat32, nonfinite);
    CheckAgainstPlainCount<double>(DType::kFloat64, nonfinite);
  }
}

TEST(StepDistribution, ConstantAndEmpty) {
  auto d = ComputeStepDistribution(DType::kFloat32, Bytes(std::vector<float>(100, 2.5f)));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->min, 2.5);
  EXPECT_EQ(d->max, 2.5);
  EXPECT_EQ(Percentile(*d, 50), 2.5);
  auto r = Rebin(*d, std::vector<double>{0, 1, 2, 3, 4});
  EXPECT_EQ(r, (std::vector<double>{0, 0, 100, 0}));
  auto nan = ComputeStepDistribution(DType::kFloat32, Bytes(std::vector<float>(4, NAN)));
  ASSERT_TRUE(nan.ok());
  EXPECT_EQ(nan->count, 0u);
  EXPECT_EQ(nan->nan_count, 4u);
  EXPECT_TRUE(std::isnan(Percentile(*nan, 50)));
}

TEST(StepDistribution, RebinKeepsEveryValueAndMatchesAlignedEdges) {
  // 0..511 evenly: each fine bin holds one value; shared edges at multiples of
  // 64 align with fine bins, so the counts are exact.
  std::vector<float> v;
  for (int i = 0; i <= 511; ++i) v.push_back(static_cast<float>(i));
  auto d = ComputeStepDistribution(DType::kFloat32, Bytes(v));
  ASSERT_TRUE(d.ok());
  std::vector<double> edges;
  for (int i = 0; i <= 8; ++i) edges.push_back(i * 511.0 / 8);
  auto r = Rebin(*d, edges);
  double total = 0;
  for (double c : r) total += c;
  EXPECT_NEAR(total, 512, 1e-9);
  for (double c : r) EXPECT_NEAR(c, 64, 1.01);
  // A wider shared range: everything lands inside, nothing is lost.
  auto wide = Rebin(*d, std::vector<double>{-1000, 0, 1000});
  EXPECT_NEAR(wide[0] + wide[1], 512, 1e-9);
  EXPECT_NEAR(wide[1], 512, 1.01);
}

TEST(JsonWriter, EscapesAndSeparates) {
  JsonWriter j;
  j.BeginObject();
  j.Key("a\"b").String("x\\y\n\t\x01");
  j.Key("n").BeginArray().Number(1.5).Number(NAN).Int(-3).Uint(7).Bool(true).Null().EndArray();
  j.Key("e").BeginObject().EndObject();
  j.Key("big").Number(0.1);
  j.EndObject();
  EXPECT_EQ(j.text(),
            "{\"a\\\"b\":\"x\\\\y\\n\\t\\u0001\",\"n\":[1.5,null,-3,7,true,null],\"e\":{},"
            "\"big\":0.1}");
}

TEST(PrometheusText, ParsesBackWithEscapedLabels) {
  PrometheusText t;
  t.Family("a_total", "counter", "help with \\ and\nnewline");
  t.Sample("a_total", {{"k", "q\"uote\\back\nline"}}, 3);
  BucketHistogram h({0.5, 1});
  h.Observe(0.2);
  h.Observe(0.7);
  h.Observe(9);
  t.HistogramFamily("lat_seconds", "latency", h.Read());
  auto m = testing::ParsePrometheusText(t.text());
  ASSERT_EQ(m.error, "") << t.text();
  EXPECT_EQ(m.at("a_total{k=\"q\\\"uote\\\\back\\nline\"}"), 3);
  EXPECT_EQ(m.at("lat_seconds_bucket{le=\"0.5\"}"), 1);
  EXPECT_EQ(m.at("lat_seconds_bucket{le=\"1\"}"), 2);
  EXPECT_EQ(m.at("lat_seconds_bucket{le=\"+Inf\"}"), 3);
  EXPECT_EQ(m.at("lat_seconds_count"), 3);
  EXPECT_NEAR(m.at("lat_seconds_sum"), 9.9, 1e-12);
  EXPECT_EQ(m.help.at("a_total"), "help with \\\\ and\\nnewline");
}

}  // namespace
}  // namespace tensorkeep
