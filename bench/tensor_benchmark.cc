// Micro-benchmarks of the tensor module on 1M-element float32 tensors.
//
// Each ComputeReductions case has a BM_PlainLoop* baseline that computes the
// same reductions with the straightforward C++ loop (float64 accumulation, one
// pass), measured in the same run; the target is reduce >= 0.9x the plain
// loop's speed. Compare items_per_second, e.g.
//   tensor_benchmark --benchmark_filter='Mean|Sum'
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bench/plain_loops.h"
#include "benchmark/benchmark.h"
#include "tensor/dtype.h"
#include "tensor/histogram.h"
#include "tensor/npy.h"
#include "tensor/reductions.h"

namespace tensorkeep {
namespace {

constexpr size_t kElements = 1 << 20;

// 1M floats uniform in [-1, 1), like weights or activations, the same in every
// case. (prod soon underflows to 0; data that kept it at a subnormal would
// slow down the multiplications of both the baseline and the library.)
const std::vector<float>& Floats() {
  static const std::vector<float>* const floats = [] {
    auto* v = new std::vector<float>(kElements);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& f : *v) f = dist(rng);
    return v;
  }();
  return *floats;
}

absl::Span<const char> FloatBytes() {
  const std::vector<float>& v = Floats();
  return absl::Span<const char>(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

void SetCounters(benchmark::State& state) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kElements);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kElements * sizeof(float));
}

void RunReductions(benchmark::State& state, const std::vector<ReductionSpec>& specs) {
  const absl::Span<const char> bytes = FloatBytes();
  for (auto _ : state) {
    absl::StatusOr<std::vector<double>> results = ComputeReductions(DType::kFloat32, bytes, specs);
    benchmark::DoNotOptimize(results);
  }
  SetCounters(state);
}

// Baseline for mean (and sum): sum in float64, then divide.
void BM_PlainLoopSum_f32(benchmark::State& state) {
  const std::vector<float>& data = Floats();
  for (auto _ : state) {
    double sum = 0;
    for (float v : data) sum += v;
    double mean = sum / static_cast<double>(data.size());
    benchmark::DoNotOptimize(mean);
  }
  SetCounters(state);
}
BENCHMARK(BM_PlainLoopSum_f32);

void BM_Reduce_mean_f32(benchmark::State& state) { RunReductions(state, {{ReductionKind::kMean}}); }
BENCHMARK(BM_Reduce_mean_f32);

// Baseline for min and max.
void BM_PlainLoopMinMax_f32(benchmark::State& state) {
  const std::vector<float>& data = Floats();
  for (auto _ : state) {
    double min = std::numeric_limits<double>::infinity();
    double max = -min;
    for (float v : data) {
      min = std::min<double>(min, v);
      max = std::max<double>(max, v);
    }
    benchmark::DoNotOptimize(min);
    benchmark::DoNotOptimize(max);
  }
  SetCounters(state);
}
BENCHMARK(BM_PlainLoopMinMax_f32);

void BM_Reduce_minmax_f32(benchmark::State& state) {
  RunReductions(state, {{ReductionKind::kMin}, {ReductionKind::kMax}});
}
BENCHMARK(BM_Reduce_minmax_f32);

// Baseline for mean and std: one pass with sums shifted by the first element.
void BM_PlainLoopMeanStd_f32(benchmark::State& state) {
  const std::vector<float>& data = Floats();
  for (auto _ : state) benchmark::DoNotOptimize(bench::PlainLoopMeanStd(data));
  SetCounters(state);
}
BENCHMARK(BM_PlainLoopMeanStd_f32);

void BM_Reduce_mean_std_f32(benchmark::State& state) {
  RunReductions(state, {{ReductionKind::kMean}, {ReductionKind::kStd}});
}
BENCHMARK(BM_Reduce_mean_std_f32);

// Baseline for all 18 reductions (each kind of x and of |x|): one pass
// computing every accumulator they need.
void BM_PlainLoopAll_f32(benchmark::State& state) {
  const std::vector<float>& data = Floats();
  for (auto _ : state) benchmark::DoNotOptimize(bench::PlainLoopAll(data));
  SetCounters(state);
}
BENCHMARK(BM_PlainLoopAll_f32);

void BM_Reduce_all_f32(benchmark::State& state) {
  std::vector<ReductionSpec> specs;
  for (bool abs : {false, true}) {
    for (ReductionKind kind : {ReductionKind::kMin, ReductionKind::kMax, ReductionKind::kMean,
                               ReductionKind::kStd, ReductionKind::kVariance, ReductionKind::kSum,
                               ReductionKind::kProd, ReductionKind::kL1, ReductionKind::kL2}) {
      specs.push_back({kind, abs});
    }
  }
  RunReductions(state, specs);
}
BENCHMARK(BM_Reduce_all_f32);

void BM_Histogram_f32(benchmark::State& state) {
  const absl::Span<const char> bytes = FloatBytes();
  const int bins = static_cast<int>(state.range(0));
  for (auto _ : state) {
    absl::StatusOr<Histogram> histogram =
        ComputeHistogram(DType::kFloat32, bytes, bins, std::nullopt);
    benchmark::DoNotOptimize(histogram);
  }
  SetCounters(state);
}
BENCHMARK(BM_Histogram_f32)->Arg(64)->Arg(1000);

void BM_NpyParse(benchmark::State& state) {
  const absl::Span<const char> bytes = FloatBytes();
  const std::string file =
      EncodeNpy({DType::kFloat32, {1024, 1024}, std::string(bytes.data(), bytes.size())});
  for (auto _ : state) {
    absl::StatusOr<NpyArray> array = ParseNpy(file);
    benchmark::DoNotOptimize(array);
  }
  SetCounters(state);
}
BENCHMARK(BM_NpyParse);

void BM_NpyEncode(benchmark::State& state) {
  const absl::Span<const char> bytes = FloatBytes();
  const NpyArray array{DType::kFloat32, {1024, 1024}, std::string(bytes.data(), bytes.size())};
  for (auto _ : state) {
    std::string file = EncodeNpy(array);
    benchmark::DoNotOptimize(file);
  }
  SetCounters(state);
}
BENCHMARK(BM_NpyEncode);

}  // namespace
}  // namespace tensorkeep

BENCHMARK_MAIN();
