// Whole-tensor reductions (smdebug's "reductions", "abs_reductions" and
// "norms"): min, max, mean, std, variance, sum, prod and the l1/l2 norms of a
// tensor's values, computed in one pass over its bytes.
//
// All functions here are pure and thread-safe.
#ifndef TENSORKEEP_TENSOR_REDUCTIONS_H_
#define TENSORKEEP_TENSOR_REDUCTIONS_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/dtype.h"

namespace tensorkeep {

// One reduction of all the elements of a tensor.
enum class ReductionKind { kMin, kMax, kMean, kStd, kVariance, kSum, kProd, kL1, kL2 };

// The ReductionKind named `name`: one of "min", "max", "mean", "std",
// "variance", "sum", "prod", "l1", "l2" (smdebug's names; exact match).
// Returns InvalidArgument, listing the accepted names, for any other string.
absl::StatusOr<ReductionKind> ParseReduction(std::string_view name);

// The name of `kind` as ParseReduction accepts it; "invalid" for a value that
// is not a ReductionKind.
std::string_view ReductionName(ReductionKind kind);

// A requested reduction: `kind` of the values, or of their absolute values if
// `abs` is set.
struct ReductionSpec {
  ReductionKind kind;
  bool abs = false;
};

// Computes every reduction in `specs` of the flattened tensor whose elements of
// type `dtype` are `data` (little-endian, any alignment; in C order to match
// numpy exactly, though the order only matters to rounding and to where prod
// overflows). Result i answers specs[i].
//
// The semantics are numpy's on the array converted to float64 (bool counts as
// 0/1): min and max are NaN if any element is NaN; mean is sum / n; std and
// variance are the population ones (ddof=0); prod multiplies the elements in
// order, so overflow and 0 * inf behave as numpy's; l1 = sum |x| and
// l2 = sqrt(sum x^2) (np.linalg.norm of the flattened tensor). With `abs` the
// reduction is of |x| (so l1 and l2 do not change). Sums are accumulated in
// float64, in interleaved lanes within blocks of 1024 elements and with
// compensation between blocks, so their error does not grow with the size of
// the tensor (the last bits may differ from numpy's pairwise summation's);
// variance uses sums shifted by a sampled element, so a large mean with a
// small spread loses no accuracy. A result does not depend on which other
// reductions are requested with it.
//
// Of an empty tensor: sum and the norms are 0, prod is 1, mean, std and
// variance are NaN, and min/max are an error.
//
// The data is read once, in blocks; only the accumulators the specs need are
// computed. Returns InvalidArgument if `dtype` or a spec's kind is invalid, if
// data.size() is not a multiple of DTypeSize(dtype), or if min or max of an
// empty tensor is requested.
absl::StatusOr<std::vector<double>> ComputeReductions(DType dtype, absl::Span<const char> data,
                                                      absl::Span<const ReductionSpec> specs);

}  // namespace tensorkeep

#endif  // TENSORKEEP_TENSOR_REDUCTIONS_H_
