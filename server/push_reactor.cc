#include "server/push_reactor.h"

#include "server/grpc_status.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace {

constexpr size_t kArenaFirstBlock = 64 * 1024;

google::protobuf::ArenaOptions RequestArenaOptions(char* first_block) {
  google::protobuf::ArenaOptions o;
  o.initial_block = first_block;
  o.initial_block_size = kArenaFirstBlock;
  o.start_block_size = kArenaFirstBlock;
  o.max_block_size = 1 << 20;
  return o;
}

}  // namespace

PushReactor::PushReactor(grpc::CallbackServerContext* context, Collector* collector,
                         std::atomic<int>* active)
    : context_(context),
      collector_(collector),
      active_(active),
      session_(collector),
      guard_(std::make_shared<Guard>()),
      arena_block_(new char[kArenaFirstBlock]),
      arena_(RequestArenaOptions(arena_block_.get())),
      request_(google::protobuf::Arena::CreateMessage<v1::PushRequest>(&arena_)) {
  guard_->reactor = this;
  active_->fetch_add(1);
  StartRead(request_);
}

void PushReactor::OnDone() {
  std::shared_ptr<Guard> guard = guard_;
  {
    std::lock_guard<std::mutex> lock(guard->mu);
    guard->reactor = nullptr;
  }
  std::atomic<int>* active = active_;
  delete this;
  active->fetch_sub(1);
}

void PushReactor::OnTrialChanged() {
  Actions action;
  {
    absl::MutexLock lock(&mu_);
    if (stop_sent_ || finished_ || !session_.trial()->stop_requested(nullptr)) return;
    ack_wanted_ = true;
    action = NextActionsLocked();
  }
  Act(action);
}

void PushReactor::OnReadDone(bool ok) {
  Actions action;
  if (!ok) {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    reads_done_ = true;
    action = NextActionsLocked();
  } else {
    const uint64_t seq = request_->seq();
    auto outcome = session_.Handle(*request_);
    arena_.Reset();
    request_ = google::protobuf::Arena::CreateMessage<v1::PushRequest>(&arena_);
    if (subscription_ == nullptr && session_.trial() != nullptr) {
      std::weak_ptr<Guard> weak = guard_;
      subscription_ = session_.trial()->Subscribe([weak] {
        if (auto g = weak.lock()) {
          std::lock_guard<std::mutex> lock(g->mu);
          if (g->reactor != nullptr) g->reactor->OnTrialChanged();
        }
      });
    }
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
    action = NextActionsLocked();
  }
  Act(action);
}

void PushReactor::OnCommitted(uint64_t seq, const absl::Status& status) {
  Actions action;
  {
    absl::MutexLock lock(&mu_);
    if (!inflight_.empty() && inflight_.front() == seq) inflight_.pop_front();
    if (!status.ok() && error_.ok()) {
      error_ = absl::UnavailableError("the collector could not store the data: " +
                                      std::string(status.message()));
      reads_done_ = true;
    }
    ack_wanted_ = true;
    action = NextActionsLocked();
  }
  Act(action);
}

void PushReactor::OnWriteDone(bool ok) {
  Actions action;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The client went away; nothing more can be sent.
      reads_done_ = true;
      ack_wanted_ = false;
      if (error_.ok()) error_ = absl::CancelledError("client went away");
    }
    action = NextActionsLocked();
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

PushReactor::Actions PushReactor::NextActionsLocked() {
  Actions a;
  if (finished_) return a;
  if (!writing_ && ack_wanted_) {
    ack_wanted_ = false;
    const uint64_t acked = inflight_.empty() ? last_seq_ : inflight_.front() - 1;
    bool stop_news = false;
    if (!stop_sent_ && session_.trial() != nullptr) {
      stop_news = session_.trial()->stop_requested(nullptr);
    }
    if (acked > acked_sent_ || stop_news) {
      response_ = MakeAckLocked();
      writing_ = true;
      a.write = true;
    }
  }
  if (reads_done_) {
    if (inflight_.empty() && !writing_) {
      finished_ = true;
      a.finish = true;
      a.status = absl::IsCancelled(error_) ? absl::OkStatus() : error_;
    }
    return a;
  }
  if (!reading_ && inflight_.size() < kMaxInflightPerStream &&
      (inflight_.empty() || collector_->queued_bytes() < kQueueBudget)) {
    reading_ = true;
    a.read = true;
  }
  return a;
}

void PushReactor::Act(const Actions& a) {
  // A read and a write may be outstanding together. Start the read first:
  // the reactor cannot finish while the write it is about to start is pending.
  if (a.read) StartRead(request_);
  if (a.write) {
    StartWrite(&response_);  // response_ is not touched again until OnWriteDone
    return;
  }
  if (a.finish) Finish(ToGrpcStatus(a.status, context_));
}

}  // namespace tensorkeep
