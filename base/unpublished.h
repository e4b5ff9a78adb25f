// Unpublished trials: copies written by `tensorkeep rebalance`
// (docs/scaling-out.md) stay hidden until published (proto/tensorkeep.proto,
// Open.unpublished and PublishTrial). Only calls carrying this request
// metadata key with the value "1" see them.
#ifndef TENSORKEEP_BASE_UNPUBLISHED_H_
#define TENSORKEEP_BASE_UNPUBLISHED_H_

namespace tensorkeep {

inline constexpr char kUnpublishedMetadata[] = "tk-unpublished";

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_UNPUBLISHED_H_
