#include "client/step_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace client {

std::unique_ptr<StepStream> StepStream::Start(std::shared_ptr<Connection> connection,
                                              std::string trial, const StepStreamOptions& options) {
  std::unique_ptr<StepStream> stream(
      new StepStream(std::move(connection), std::move(trial), options));
  stream->reader_ = std::thread([s = stream.get()] { s->ReadLoop(); });
  return stream;
}

StepStream::StepStream(std::shared_ptr<Connection> connection, std::string trial,
                       const StepStreamOptions& options)
    : connection_(std::move(connection)), trial_(std::move(trial)), options_(options) {}

StepStream::~StepStream() {
  Cancel();
  if (reader_.joinable()) reader_.join();
}

void StepStream::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (call_ != nullptr) call_->TryCancel();
  cv_.notify_all();
}

absl::StatusOr<std::optional<v1::StepEvent>> StepStream::Next(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [this] { return !queue_.empty() || done_ || cancelled_; };
  if (deadline == absl::InfiniteFuture()) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_until(lock, absl::ToChronoTime(deadline), ready)) {
    return std::optional<v1::StepEvent>();
  }
  if (!queue_.empty()) {
    v1::StepEvent event = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();  // room for the reader
    return std::optional<v1::StepEvent>(std::move(event));
  }
  if (cancelled_) return absl::CancelledError("the step stream was cancelled");
  return final_status_.ok() ? absl::InternalError("the step stream ended without end of trial")
                            : final_status_;
}

bool StepStream::Push(const v1::StepEvent& event) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.size() < kMaxQueued || cancelled_; });
  if (cancelled_) return false;
  queue_.push_back(event);
  cv_.notify_all();
  return true;
}

bool StepStream::Backoff(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, absl::ToChronoNanoseconds(d), [this] { return cancelled_; });
  return !cancelled_;
}

void StepStream::FailWith(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  final_status_ = std::move(status);
  cv_.notify_all();
}

void StepStream::ReadLoop() {
  uint64_t next = options_.from_step;
  const absl::Duration kFirstDelay = absl::Milliseconds(20);
  absl::Duration delay = kFirstDelay;
  std::optional<absl::Time> unreachable_since;
  bool waiting_logged = false;
  while (true) {
    grpc::ClientContext context;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) break;
      call_ = &context;
    }
    v1::WatchStepsRequest request;
    request.set_trial(trial_);
    request.set_from_step(next);
    auto reader = connection_->stub()->WatchSteps(&context, request);
    v1::StepEvent event;
    bool ended = false;
    bool cancelled = false;
    while (reader->Read(&event)) {
      delay = kFirstDelay;
      unreachable_since.reset();
      if (event.end_of_trial()) {
        ended = Push(event);
        cancelled = !ended;
        break;
      }
      if (event.step() < next) continue;  // never a step twice
      next = event.step() + 1;
      if (!Push(event)) {
        cancelled = true;
        break;
      }
    }
    if (cancelled || ended) context.TryCancel();
    grpc::Status status = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      call_ = nullptr;
      if (cancelled_ || cancelled) break;
      if (ended) {
        done_ = true;
        cv_.notify_all();
        return;
      }
    }
    absl::Status s = FromGrpc(status, &context, *connection_);
    Reason reason = GetReason(s);
    if (status.ok()) {
      spdlog::debug("WatchSteps on trial '{}' ended early; resuming at step {}", trial_, next);
    } else if (reason == Reason::kNoMoreData) {
      v1::StepEvent end;
      end.set_end_of_trial(true);
      if (Push(end)) FailWith(absl::OkStatus());
      return;
    } else if (reason == Reason::kTrialNotFound && options_.wait_for_trial) {
      if (!waiting_logged) {
        if (options_.on_waiting_for_trial) {
          options_.on_waiting_for_trial();
        } else {
          spdlog::info("trial '{}' does not exist yet; waiting for it", trial_);
        }
        waiting_logged = true;
      }
    } else if ((status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                status.error_code() == grpc::StatusCode::CANCELLED) &&
               reason == Reason::kNone) {
      // Unreachable, or a collector shutting down cancelled the call.
      absl::Time now = absl::Now();
      if (!unreachable_since.has_value()) unreachable_since = now;
      if (now - *unreachable_since > options_.reconnect_timeout) {
        FailWith(s);
        return;
      }
      spdlog::debug("WatchSteps on trial '{}': {}; retrying", trial_, std::string(s.message()));
    } else {
      FailWith(s);
      return;
    }
    if (!Backoff(delay)) break;
    delay = std::min(delay * 2, options_.max_backoff);
  }
  FailWith(absl::CancelledError("the step stream was cancelled"));
}

}  // namespace client
}  // namespace tensorkeep
