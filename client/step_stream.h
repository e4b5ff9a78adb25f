// StepStream: the complete global steps of a trial as they complete, from the
// collector's WatchSteps stream: what rule invocation (rules/invoke_rule.h) and
// `tensorkeep export-tensorboard --follow` consume.
//
// A reader thread holds the WatchSteps call and queues its events (at most
// kMaxQueued; beyond that it stops reading and gRPC's flow control holds the
// server back). The consumer takes them with Next(deadline), which can time
// out, so that a rule can act on a stall. Nothing polls: the reader blocks in
// the stream, the consumer on a condition variable.
//
// Failures: a trial that does not exist yet (TrialNotFound) is waited for when
// `wait_for_trial` is set (the rule worker may start before the training
// job); a collector that cannot be reached, or a stream that ends early or is
// cancelled by the collector (shutting down), is reconnected from the next
// step with backoff,
// for up to `reconnect_timeout`. Each step comes once, in increasing order,
// across reconnections. NoMoreData counts as the end of the trial.
//
// Thread safety: Next() from one thread at a time; Cancel() from any thread.
#ifndef TENSORKEEP_CLIENT_STEP_STREAM_H_
#define TENSORKEEP_CLIENT_STEP_STREAM_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/connection.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace client {

struct StepStreamOptions {
  // First global step of interest.
  uint64_t from_step = 0;
  // Wait (with backoff) while the trial does not exist, instead of failing.
  bool wait_for_trial = true;
  // Give up after the collector was unreachable for this long.
  absl::Duration reconnect_timeout = absl::Seconds(60);
  // Longest pause between two attempts to (re)connect.
  absl::Duration max_backoff = absl::Milliseconds(500);
  // Called once (on the reader thread) when the trial does not exist yet and
  // the stream waits for it; unset: logged at info level.
  std::function<void()> on_waiting_for_trial;
};

class StepStream {
 public:
  static constexpr size_t kMaxQueued = 1024;

  // Starts watching `trial` on `connection` (shared; kept alive by the stream).
  static std::unique_ptr<StepStream> Start(std::shared_ptr<Connection> connection,
                                           std::string trial, const StepStreamOptions& options);
  // Cancels the call and joins the reader.
  ~StepStream();

  StepStream(const StepStream&) = delete;
  StepStream& operator=(const StepStream&) = delete;

  // The next event: a complete step, or the end-of-trial event (after which
  // there is no other). nullopt when `deadline` passed first. An error when
  // the stream failed for good (or was cancelled: Cancelled).
  absl::StatusOr<std::optional<v1::StepEvent>> Next(absl::Time deadline = absl::InfiniteFuture());

  // Ends the stream: the reader stops, Next() returns Cancelled once the
  // queue is drained. Idempotent.
  void Cancel();

 private:
  StepStream(std::shared_ptr<Connection> connection, std::string trial,
             const StepStreamOptions& options);
  void ReadLoop();
  // Waits `d` unless cancelled; returns false if cancelled.
  // (Each of these locks mu_.)
  bool Backoff(absl::Duration d);
  // Queues an event, blocking while the queue is full; false if cancelled.
  bool Push(const v1::StepEvent& event);
  void FailWith(absl::Status status);

  const std::shared_ptr<Connection> connection_;
  const std::string trial_;
  const StepStreamOptions options_;

  // std::mutex rather than absl::Mutex: ThreadSanitizer sees through it
  // (Debian's abseil is not instrumented).
  std::mutex mu_;
  std::condition_variable cv_;  // signalled on every change below
  std::deque<v1::StepEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // no more events will be queued
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;  // the current call

  std::thread reader_;
};

}  // namespace client
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_STEP_STREAM_H_
