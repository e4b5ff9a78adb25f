// MinMaxEnvelope: a series of (step, value) cut down to at most N buckets of
// consecutive points, each keeping its lowest and highest value and the steps
// they were at, so that a plotted envelope never hides a spike (TensorBoard
// samples points at random and loses them: tensorflow/tensorboard#2041).
//
// Pure functions; thread-safe.
#ifndef TENSORKEEP_SERVER_VIEWS_DOWNSAMPLE_H_
#define TENSORKEEP_SERVER_VIEWS_DOWNSAMPLE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tensorkeep {

struct SeriesPoint {
  uint64_t step = 0;
  double value = 0;
};

struct EnvelopeBucket {
  uint64_t first_step = 0, last_step = 0;
  double min = 0, max = 0, mean = 0;  // NaN when every value of the bucket is NaN
  uint64_t min_step = 0, max_step = 0;
  uint32_t count = 0;  // points in the bucket
};

// `points` sorted by step. With at most `max_buckets` points each point is
// its own bucket (full resolution); otherwise ceil(n / max_buckets) points a
// bucket. NaN values are skipped in min, max and mean; ±Inf count as extremes.
std::vector<EnvelopeBucket> MinMaxEnvelope(absl::Span<const SeriesPoint> points,
                                           size_t max_buckets);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_VIEWS_DOWNSAMPLE_H_
