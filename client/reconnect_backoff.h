// ReconnectBackoff: the waits of a writer between attempts to reach a
// collector it lost: exponential, with jitter, from the one policy both
// writers share (proto/limits.proto, enum ReconnectPolicy; the table is in
// docs/architecture.md).
//
// Thread safety: none (one writer's reconnecting thread owns it).
#ifndef TENSORKEEP_CLIENT_RECONNECT_BACKOFF_H_
#define TENSORKEEP_CLIENT_RECONNECT_BACKOFF_H_

#include <random>

#include "proto/limits.pb.h"

namespace tensorkeep {
namespace client {

// The policy's defaults, in seconds.
inline constexpr double kReconnectBackoffFirstSeconds = v1::RECONNECT_BACKOFF_FIRST_MS / 1000.0;
inline constexpr double kReconnectBackoffMaxSeconds = v1::RECONNECT_BACKOFF_MAX_MS / 1000.0;
inline constexpr double kReconnectJitterFraction = v1::RECONNECT_JITTER_PERCENT / 100.0;
inline constexpr double kReconnectGiveUpSeconds = v1::RECONNECT_GIVE_UP_SECONDS;
inline constexpr double kExitCloseSeconds = v1::RECONNECT_EXIT_CLOSE_SECONDS;

class ReconnectBackoff {
 public:
  ReconnectBackoff(double first_seconds, double max_seconds);
  // The wait before the next attempt: the current backoff less up to
  // kReconnectJitterFraction of it, drawn at random; then doubles the backoff
  // (up to the maximum).
  double Next();
  // After a success: the next wait is the first one again.
  void Reset() { current_ = first_; }

 private:
  const double first_;
  const double max_;
  double current_;
  std::mt19937_64 rng_;
};

}  // namespace client
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_RECONNECT_BACKOFF_H_
