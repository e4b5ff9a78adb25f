// TensorViews: what the web UI draws of a tensor over steps, computed on the
// server from the stored values through the Collector's own reads (the same
// paths as GetReductions and GetHistogram) and cached (server/views/
// view_cache.h):
//  * a reduction series: one reduction (mean, l2, ...) at each complete step,
//    per worker; cached per (trial, tensor, worker, mode, reduction) and
//    extended as steps complete, so a live page recomputes only new steps;
//  * distributions: each step's StepDistribution (one read and scan of the
//    value), cached per (trial, tensor, worker, step).
// Both cover only complete steps (as smdebug's tensor.steps()), within a
// global step range [from, to) (to 0: no end).
//
// Thread safety: thread-safe.
#ifndef TENSORKEEP_SERVER_VIEWS_TENSOR_VIEWS_H_
#define TENSORKEEP_SERVER_VIEWS_TENSOR_VIEWS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/collector.h"
#include "server/views/downsample.h"
#include "server/views/step_distribution.h"
#include "server/views/view_cache.h"

namespace tensorkeep {

struct TensorRange {
  std::string tensor;
  std::string worker;  // "": each step's first worker (smdebug's default)
  int mode = 0;        // 0 / GLOBAL: every mode; else that mode's steps
  uint64_t from = 0, to = 0;
};

class TensorViews {
 public:
  // `collector` is not owned. The cache holds at most `cache_bytes`, drawn
  // from the collector's memory budget.
  TensorViews(Collector* collector, size_t cache_bytes);

  // `reduction` ("mean", "l2", ...; abs: of absolute values) at each complete
  // step of the range. Steps where neither the value nor this reduction was
  // saved are left out. InvalidArgument when the range holds more than
  // `max_steps` steps (narrow it with from/to).
  absl::StatusOr<std::vector<SeriesPoint>> ReductionSeries(const Trial& trial,
                                                           const TensorRange& range,
                                                           const std::string& reduction, bool abs,
                                                           size_t max_steps);

  using StepDistributions =
      std::vector<std::pair<uint64_t, std::shared_ptr<const StepDistribution>>>;
  // Each complete step's distribution in the range (steps saved as
  // reductions only are left out); InvalidArgument beyond `max_steps` steps.
  // The values not cached yet are read and scanned by up to kMaxScanThreads
  // threads (at most the machine's cores, one a step group of 8).
  static constexpr size_t kMaxScanThreads = 4;
  absl::StatusOr<StepDistributions> Distributions(const Trial& trial, const TensorRange& range,
                                                  size_t max_steps);

  const ViewCache& cache() const { return cache_; }

 private:
  absl::StatusOr<std::vector<Trial::Located>> Locate(const Trial& trial, const TensorRange& range,
                                                     size_t max_steps) const;

  Collector* const collector_;
  ViewCache cache_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_VIEWS_TENSOR_VIEWS_H_
