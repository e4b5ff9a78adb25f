// The plain-loop baselines of the reduction benchmarks (tensorkeep-bench's
// reduce and tensor_benchmark's BM_PlainLoop*): the straightforward loops over
// float32 values, float64 accumulation, one pass, compiled with the project's
// flags. One definition, so both benchmarks compare against the same loop.
//
// Thread safety: pure functions.
#ifndef TENSORKEEP_BENCH_PLAIN_LOOPS_H_
#define TENSORKEEP_BENCH_PLAIN_LOOPS_H_

#include <vector>

#include "absl/types/span.h"

namespace tensorkeep {
namespace bench {

// Plain loops over float32 values with float64 accumulators. Each returns its
// results so that nothing is optimized away.
double PlainLoopMean(absl::Span<const float> v);
double PlainLoopMin(absl::Span<const float> v);
double PlainLoopL2(absl::Span<const float> v);
// Mean and population standard deviation in one pass (sums shifted by v[0]).
std::vector<double> PlainLoopMeanStd(absl::Span<const float> v);
// All 18 reductions (min, max, mean, std, variance, sum, prod, l1, l2 of x and
// of |x|) in one pass.
std::vector<double> PlainLoopAll(absl::Span<const float> v);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_PLAIN_LOOPS_H_
