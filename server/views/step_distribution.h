// StepDistribution: what the distribution views keep of one tensor value
// (one step, one worker): its exact finite min and max, counts of NaN and
// ±Inf, and a fine histogram (kFineBins equal bins over [min, max]) computed
// from one read of the value (tensor/histogram.h). Percentile bands (as
// TensorBoard's Distributions) and histograms on a range shared by many steps
// (TensorBoard's Histograms) are derived from it, so each value is read and
// scanned once however the page slices it: both are exact to within one fine
// bin (1/kFineBins of the step's range).
//
// Pure functions; thread-safe.
#ifndef TENSORKEEP_SERVER_VIEWS_STEP_DISTRIBUTION_H_
#define TENSORKEEP_SERVER_VIEWS_STEP_DISTRIBUTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/dtype.h"

namespace tensorkeep {

struct StepDistribution {
  static constexpr int kFineBins = 512;
  uint64_t count = 0;  // finite values
  uint64_t nan_count = 0, inf_count = 0;
  double min = 0, max = 0;       // of the finite values (0 when none)
  // The fine histogram: counts.size() + 1 edges, increasing (empty when no
  // finite value). A step's own has kFineBins bins; a merge of several
  // (MergeStepDistributions) has the union of their edges, where a zero-width
  // bin [v, v] holds a part whose values all equal v, and fractional counts.
  std::vector<double> edges;
  std::vector<double> counts;

  // Bytes held (for the cache's budget).
  size_t bytes() const { return sizeof(*this) + edges.size() * 8 + counts.size() * 8; }
};

// The distribution of the elements of type `dtype` in `data`.
absl::StatusOr<StepDistribution> ComputeStepDistribution(DType dtype, absl::Span<const char> data);

// The distribution of the union of `parts`' values (one step of several
// workers): counts add up, min and max are the parts' extremes, and the fine
// histogram is on the union of the parts' fine edges, which refines every
// part's bins: each part's bin is spread over the union bins it covers in
// proportion to their width. Under the model the percentiles already use
// (values spread evenly inside each fine bin), nothing is lost: the merged
// percentiles are those of the union of the values, exact to within one of
// the parts' fine bins, as a single step's are. Null parts are skipped.
StepDistribution MergeStepDistributions(absl::Span<const StepDistribution* const> parts);

// The value at percentile `p` (0-100) of the finite values, linearly
// interpolated inside the fine bin that holds it; p 0 and 100 are the exact
// min and max. NaN when there is no finite value.
double Percentile(const StepDistribution& d, double p);

// `d`'s finite values counted in the bins of `edges` (increasing), each fine
// bin's count spread over the bins it overlaps in proportion; values beyond
// `edges` go to the first or last bin. Returns edges.size() - 1 counts.
std::vector<double> Rebin(const StepDistribution& d, absl::Span<const double> edges);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_VIEWS_STEP_DISTRIBUTION_H_
