#include "server/push_reactor.h"

#include "server/grpc_status.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {

PushReactor::PushReactor(grpc::CallbackServerContext* context, Collector* collector)
    : context_(context), collector_(collector), session_(collector) {
  StartRead(&request_);
}

void PushReactor::OnReadDone(bool ok) {
  Action action;
  if (!ok) {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    reads_done_ = true;
    action = NextActionLocked();
  } else {
    const uint64_t seq = request_.seq();
    auto outcome = session_.Handle(request_);
    request_.Clear();
    absl::MutexLock lock(&mu_);
    reading_ = false;
    if (!outcome.ok()) {
      spdlog::warn("Push from {}: rejected message {}: {}", context_->peer(), seq,
                   outcome.status().ToString());
      error_ = outcome.status();
      reads_done_ = true;
    } else {
      last_seq_ = seq;
      if (outcome->wants_ack) ack_wanted_ = true;
      if (outcome->closes) reads_done_ = true;
      if (outcome->write.has_value()) {
        inflight_.push_back(seq);
        PendingWrite& w = *outcome->write;
        w.done = [this, seq](const absl::Status& s) { OnCommitted(seq, s); };
        collector_->Submit(std::move(w));
      }
    }
    action = NextActionLocked();
  }
  Act(action);
}

void PushReactor::OnCommitted(uint64_t seq, const absl::Status& status) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (!inflight_.empty() && inflight_.front() == seq) inflight_.pop_front();
    if (!status.ok() && error_.ok()) {
      error_ = absl::UnavailableError("the collector could not store the data: " +
                                      std::string(status.message()));
      reads_done_ = true;
    }
    ack_wanted_ = true;
    action = NextActionLocked();
  }
  Act(action);
}

void PushReactor::OnWriteDone(bool ok) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The client went away; nothing more can be sent.
      reads_done_ = true;
      ack_wanted_ = false;
      if (error_.ok()) error_ = absl::CancelledError("client went away");
    }
    action = NextActionLocked();
  }
  Act(action);
}

v1::PushResponse PushReactor::MakeAckLocked() {
  v1::PushResponse ack;
  const uint64_t acked = inflight_.empty() ? last_seq_ : inflight_.front() - 1;
  ack.set_acked_seq(acked);
  acked_sent_ = acked;
  if (session_.trial() != nullptr) {
    ack.set_committed_through(session_.trial()->CommittedThrough(session_.worker()));
    std::string reason;
    if (session_.trial()->stop_requested(&reason)) {
      ack.set_stop_requested(true);
      ack.set_stop_reason(reason);
      stop_sent_ = true;
    }
  } else {
    ack.set_committed_through(-1);
  }
  return ack;
}

PushReactor::Action PushReactor::NextActionLocked() {
  if (finished_) return Action::kNone;
  if (!writing_ && ack_wanted_) {
    const uint64_t acked = inflight_.empty() ? last_seq_ : inflight_.front() - 1;
    bool stop_news = false;
    if (!stop_sent_ && session_.trial() != nullptr) stop_news = session_.trial()->stop_requested(nullptr);
    if (acked > acked_sent_ || stop_news) {
      ack_wanted_ = false;
      response_ = MakeAckLocked();
      writing_ = true;
      return Action::kWrite;
    }
    ack_wanted_ = false;
  }
  if (reads_done_) {
    if (inflight_.empty() && !writing_ && !ack_wanted_) {
      finished_ = true;
      return Action::kFinish;
    }
    return Action::kNone;
  }
  if (!reading_ && inflight_.size() < kMaxInflightPerStream &&
      (inflight_.empty() || collector_->queued_bytes() < kQueueBudget)) {
    reading_ = true;
    return Action::kRead;
  }
  return Action::kNone;
}

void PushReactor::Act(Action action) {
  switch (action) {
    case Action::kNone:
      return;
    case Action::kRead:
      StartRead(&request_);
      return;
    case Action::kWrite: {
      // response_ is not touched again until OnWriteDone.
      StartWrite(&response_);
      // A write and a read may be outstanding together.
      Action next;
      {
        absl::MutexLock lock(&mu_);
        next = NextActionLocked();
      }
      if (next == Action::kRead) StartRead(&request_);
      return;
    }
    case Action::kFinish: {
      absl::Status error;
      {
        absl::MutexLock lock(&mu_);
        error = error_;
      }
      if (absl::IsCancelled(error)) error = absl::OkStatus();
      Finish(ToGrpcStatus(error, context_));
      return;
    }
  }
}

}  // namespace tensorkeep
