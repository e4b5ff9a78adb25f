#include "server/push_reactor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
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

// PushReactor::SetHandledHookForTesting's hook (set while no stream runs).
std::atomic<bool> handled_hook_set{false};
std::function<void(uint64_t)>& HandledHook() {
  static auto* hook = new std::function<void(uint64_t)>();
  return *hook;
}

}  // namespace

void PushReactor::SetHandledHookForTesting(std::function<void(uint64_t seq)> hook) {
  handled_hook_set.store(false);
  HandledHook() = std::move(hook);
  handled_hook_set.store(static_cast<bool>(HandledHook()));
}

bool PushStreams::Add(const std::shared_ptr<Guard>& guard) {
  active_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  guards_.erase(std::remove_if(guards_.begin(), guards_.end(),
                               [](const std::weak_ptr<Guard>& g) { return g.expired(); }),
                guards_.end());
  guards_.push_back(guard);
  return !draining_;
}

void PushStreams::Remove() { active_.fetch_sub(1); }

void PushStreams::DrainAll() {
  std::vector<std::weak_ptr<Guard>> guards;
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    guards = guards_;
  }
  for (const auto& weak : guards) {
    if (auto g = weak.lock()) {
      std::lock_guard<std::mutex> lock(g->mu);
      if (g->reactor != nullptr) g->reactor->Drain();
    }
  }
}

PushReactor::PushReactor(grpc::CallbackServerContext* context, Collector* collector,
                         PushStreams* streams, CallAccess access)
    : context_(context),
      access_(std::move(access)),
      collector_(collector),
      streams_(streams),
      session_(collector),
      guard_(std::make_shared<Guard>()),
      arena_block_(new char[kArenaFirstBlock]),
      arena_(RequestArenaOptions(arena_block_.get())),
      request_(google::protobuf::Arena::CreateMessage<v1::PushRequest>(&arena_)) {
  guard_->reactor = this;
  if (!streams_->Add(guard_)) {
    // Registered after the collector began to shut down: end at once.
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
    }
    Drain();
    return;
  }
  StartRead(request_);
}

void PushReactor::Drain() {
  Actions action;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || reads_done_) return;  // ending already
    reads_done_ = true;
    error_ = absl::UnavailableError(
        absl::StrCat("the collector is shutting down; messages after ", last_seq_,
                     " were not read: reconnect and resend what was not acknowledged"));
    ack_wanted_ = true;
    action = NextActionsLocked();
  }
  Act(action);
}

void PushReactor::OnDone() {
  std::shared_ptr<Guard> guard = guard_;
  {
    std::lock_guard<std::mutex> lock(guard->mu);
    guard->reactor = nullptr;
  }
  PushStreams* streams = streams_;
  delete this;
  streams->Remove();
}

void PushReactor::OnTrialChanged() {
  Actions action;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (session_.trial()->deleted()) {
      // The writer learns it now, not at its next write: the stream ends
      // (once what is in flight is answered) with the deletion's error.
      if (reads_done_) return;  // ending already
      error_ = session_.trial()->DeletedError();
      reads_done_ = true;
      ack_wanted_ = true;
      action = NextActionsLocked();
    } else {
      if (stop_sent_ || !session_.trial()->stop_requested(nullptr)) return;
      ack_wanted_ = true;
      action = NextActionsLocked();
    }
  }
  Act(action);
}

void PushReactor::OnReadDone(bool ok) {
  Actions action;
  if (!ok) {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    reads_done_ = true;
    if (!closed_ && error_.ok()) {
      // Writers send Close before they half-close. Reads also end this way
      // when gRPC cannot parse a message (e.g. a string field that is not
      // UTF-8): say so rather than end with OK as if all were stored.
      error_ =
          MakeError(Reason::kBadRequest,
                    absl::StrCat("the Push stream ended without Close after message ", last_seq_,
                                 ": the next message could not be parsed (is "
                                 "every string field valid UTF-8?) or the writer stopped "
                                 "sending; nothing after message ",
                                 last_seq_, " was stored"));
    }
    action = NextActionsLocked();
  } else {
    bool drop = false;
    {
      absl::MutexLock lock(&mu_);
      if (reads_done_) {
        // Drained (or the client went away) while this read was pending:
        // the message is not handled (never acknowledged: the writer
        // resends it), and no write may outlive the reactor.
        drop = true;
        reading_ = false;
        action = NextActionsLocked();
      } else {
        // From here until the write (if any) is in inflight_, a failed
        // commit or a drain on another thread must not finish the stream:
        // the write's callback would reach a deleted reactor.
        handling_ = true;
      }
    }
    if (drop) {
      Act(action);
      return;
    }
    const uint64_t seq = request_->seq();
    const absl::Status allowed =
        request_->has_open() ? access_.CheckTrial(request_->open().trial()) : absl::OkStatus();
    auto outcome =
        allowed.ok() ? session_.Handle(*request_) : absl::StatusOr<WriteSession::Outcome>(allowed);
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
    if (handled_hook_set.load(std::memory_order_relaxed)) HandledHook()(seq);
    absl::MutexLock lock(&mu_);
    reading_ = false;
    handling_ = false;
    partial_from_ = session_.partial_from();
    if (!outcome.ok()) {
      spdlog::warn("Push from {}: rejected message {}: {}", context_->peer(), seq,
                   outcome.status().ToString());
      error_ = outcome.status();
      reads_done_ = true;
    } else {
      last_seq_ = seq;
      if (outcome->wants_ack) ack_wanted_ = true;
      if (outcome->closes) {
        reads_done_ = true;
        closed_ = true;
      }
      if (outcome->write.has_value()) {
        const uint64_t first = outcome->first_seq;
        PendingWrite& w = *outcome->write;
        const size_t bytes = 64 + (w.batch != nullptr ? w.batch->ApproximateSize() : 0);
        w.memory = collector_->memory()->Hold(bytes);
        inflight_.push_back(Inflight{first, bytes});
        inflight_bytes_ += bytes;
        w.done = [this, first](const absl::Status& s) { OnCommitted(first, s); };
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
    if (!inflight_.empty() && inflight_.front().first_seq == seq) {
      inflight_bytes_ -= inflight_.front().bytes;
      inflight_.pop_front();
    }
    if (!status.ok()) {
      // Nothing from this message on is acknowledged: the committer fails
      // the stream's later writes unwritten, and the writer resends them.
      ack_limit_ = std::min(ack_limit_, seq - 1);
      if (error_.ok()) {
        if (GetReason(status) != Reason::kNone || absl::IsResourceExhausted(status) ||
            absl::IsFailedPrecondition(status)) {
          // The writer's own doing (a conflict, a limit) or a state of the
          // trial (deleted, ended): said as it is. Made UNAVAILABLE, a
          // refusal for a deleted trial had the writer reconnect and write
          // into a new trial of the name.
          error_ = status;
        } else {
          error_ = absl::UnavailableError(absl::StrCat("the collector could not store the data (",
                                                       status.message(), "); nothing from message ",
                                                       seq, " on was acknowledged: resend it"));
        }
      }
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

uint64_t PushReactor::AckableLocked() const {
  uint64_t acked = inflight_.empty() ? last_seq_ : inflight_.front().first_seq - 1;
  // A record still waiting for its Chunk messages is only in memory.
  if (partial_from_ != 0) acked = std::min(acked, partial_from_ - 1);
  return std::min(acked, ack_limit_);
}

v1::PushResponse PushReactor::MakeAckLocked() {
  v1::PushResponse ack;
  const uint64_t acked = AckableLocked();
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
    const uint64_t acked = AckableLocked();
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
    if (inflight_.empty() && !writing_ && !handling_ && reads_starting_ == 0) {
      finished_ = true;
      a.finish = true;
      a.status = absl::IsCancelled(error_) ? absl::OkStatus() : error_;
    }
    return a;
  }
  if (!reading_ &&
      (inflight_.empty() ||
       (inflight_bytes_ < kStreamWindowBytes && inflight_.size() < kMaxInflightMessages &&
        collector_->queued_bytes() < kQueueBudget && !collector_->memory()->over()))) {
    reading_ = true;
    ++reads_starting_;
    a.read = true;
  }
  return a;
}

void PushReactor::Act(const Actions& actions) {
  Actions a = actions;
  for (;;) {
    // A read and a write may be outstanding together. The reactor cannot
    // finish while a write it started is pending (writing_), nor before the
    // read decided with it is started (reads_starting_).
    if (a.read) StartRead(request_);
    if (a.write) StartWrite(&response_);  // response_ is not touched again until OnWriteDone
    if (a.finish) {
      // Before the client can see the end: a writer that reconnects at once
      // must find its worker free.
      session_.ReleaseWriter();
      Finish(ToGrpcStatus(a.status, context_));
      return;
    }
    if (!a.read) return;
    // The read is started: the stream may finish now, here or on another
    // thread, whichever sees the last condition go.
    absl::MutexLock lock(&mu_);
    --reads_starting_;  // this thread's read, whoever decided another since
    a = NextActionsLocked();
  }
}

}  // namespace tensorkeep
