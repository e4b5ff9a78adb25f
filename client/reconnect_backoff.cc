#include "client/reconnect_backoff.h"

#include <algorithm>

namespace tensorkeep {
namespace client {

ReconnectBackoff::ReconnectBackoff(double first_seconds, double max_seconds)
    : first_(std::max(0.0, first_seconds)),
      max_(std::max(first_, max_seconds)),
      current_(first_),
      rng_(std::random_device{}()) {}

double ReconnectBackoff::Next() {
  std::uniform_real_distribution<double> share(1.0 - kReconnectJitterFraction, 1.0);
  const double wait = current_ * share(rng_);
  current_ = std::min(max_, current_ * 2);
  return wait;
}

}  // namespace client
}  // namespace tensorkeep
