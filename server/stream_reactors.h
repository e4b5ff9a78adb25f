// The server-streaming and waiting reactors of TensorKeepService:
//  - ValueStreamReactor: GetValue / GetValues, one value after another, each
//    value in chunks of at most kChunkBytes so no message nears gRPC limits;
//    values are read on the Collector's executor, never in a reaction, and a
//    large value is read chunk by chunk as the client takes them (a call
//    holds at most one chunk, counted in the memory budget). Small values
//    are read ahead, up to kReadAheadValues and kBatchBytes, by two
//    executor threads when both are free (ReadAhead).
//  - WaitReactor: WaitForSteps, finished by a commit that decides it, by its
//    timeout (a grpc::Alarm) or by cancellation.
//  - WatchStepsReactor / WatchRulesReactor: send what is new after each
//    commit of the trial.
// Waiting reactors are woken through Trial::Watch (on the Notifier's thread,
// never the committer's); the subscription callback reaches the reactor
// through a ReactorGuard so that a callback racing with the reactor's end
// never touches a deleted reactor. A wake costs what changed: a wait looks at
// its lowest undecided step, a watch at what came after its cursor. A
// reactor drops its subscription (and its watcher slot) once it is decided,
// without waiting for another commit.
#ifndef TENSORKEEP_SERVER_STREAM_REACTORS_H_
#define TENSORKEEP_SERVER_STREAM_REACTORS_H_

#include <grpcpp/alarm.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "proto/limits.pb.h"
#include "proto/tensorkeep.pb.h"
#include "server/collector.h"
#include "server/grpc_status.h"

namespace tensorkeep {

inline constexpr size_t kChunkBytes = 4u << 20;
// Small values are packed into messages of up to this size.
inline constexpr size_t kBatchBytes = 1u << 20;
// Values a GetValues call reads ahead at once, two executor threads sharing
// the reads (their bytes at most kBatchBytes, counted in the memory budget).
inline constexpr size_t kReadAheadValues = 128;

// Streams saved values. `trial` and `tensor` name what `where` locates.
// With `packed` (TensorValuesRequest.packed), small values that share their
// first one's worker, mode, dtype and shape go as one byte string per message
// (TensorValue.packed_steps) instead of a message each (`batched`).
class ValueStreamReactor : public grpc::ServerWriteReactor<v1::TensorValue> {
 public:
  ValueStreamReactor(grpc::CallbackServerContext* context, Collector* collector,
                     std::shared_ptr<Trial> trial, std::string tensor,
                     std::vector<Trial::Located> where, bool packed = false);
  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  // Runs Next on the executor (or fails the call when its queue is full).
  void ScheduleNext();
  void Next();
  // Reads the next value into current_ (a large one: opens reader_ on it);
  // false (and the call finished) when there is none or it cannot be read.
  bool LoadNext();
  // Reads the next values (up to kReadAheadValues, their small values'
  // bytes up to kBatchBytes) into ready_: this thread and, when one is free,
  // another executor thread read them, each taking the next unread one. Only
  // this thread waits, and only for values the other one has taken: a busy
  // executor never blocks it.
  void ReadAhead();
  // Finishes the call with `status`; false.
  bool Fail(const absl::Status& status);
  // The next `n` bytes of the current value into `out`; false (and the call
  // finished) when they cannot be read.
  bool ReadPiece(size_t n, std::string* out);
  // Moves current_ (whole) into `v` as a complete value.
  void EmitWhole(v1::TensorValue* v);
  // Appends current_ (whole, small) to message_'s packed values if it shares
  // their worker, mode, dtype and shape; false (nothing done) otherwise.
  bool Pack(size_t values_left);
  // Sends message_; the last message goes with the call's status in one
  // operation (no OnWriteDone round before Finish: a single GetValue is one
  // write instead of a write, a callback and a finish).
  void Send();

  grpc::CallbackServerContext* const context_;
  Collector* collector_ = nullptr;
  std::shared_ptr<Trial> trial_;
  std::string tensor_;
  std::vector<Trial::Located> where_;
  const bool packed_;
  size_t next_value_ = 0;
  // Records read ahead (ReadAhead), for where_[next_value_...], in order.
  std::deque<absl::StatusOr<Collector::Value>> ready_;
  MemoryBudget::Reservation ready_held_;  // the bytes of ready_
  Collector::Value current_;
  // The current value's bytes when it is streamed from the store, or null
  // (they are in current_.data).
  std::unique_ptr<TensorStore::BulkReader> reader_;
  size_t total_ = 0;                // the current value's size
  size_t offset_ = 0;               // of it already sent
  MemoryBudget::Reservation held_;  // the bytes of message_
  bool header_sent_ = false;
  v1::TensorValue message_;
};

// Shared between a reactor and its subscription callbacks.
template <typename R>
struct ReactorGuard {
  std::mutex mu;
  R* reactor = nullptr;  // null once the reactor is done
};

// The longest timeout a WaitReactor sets (~31 years, limits.proto); a longer
// or infinite one means no limit, as 0 does (the call's deadline still
// applies). A negative or NaN timeout is the service's BAD_REQUEST.
inline constexpr double kMaxWaitSeconds = v1::MAX_WAIT_SECONDS;

class WaitReactor : public grpc::ServerUnaryReactor {
 public:
  // `memory`: the budget the step list holds until the call is done.
  WaitReactor(grpc::CallbackServerContext* context, std::shared_ptr<Trial> trial,
              std::vector<uint64_t> steps, int mode, double timeout_seconds,
              MemoryBudget::Reservation memory = {});
  void OnCancel() override;
  void OnDone() override;

 private:
  // Finishes when every step is AVAILABLE, or one can never be. Called with
  // guard_->mu held (constructor, notifications).
  void Check();
  void Complete(const absl::Status& status);

  grpc::CallbackServerContext* const context_;
  std::shared_ptr<Trial> trial_;
  std::vector<uint64_t> steps_;  // ascending, no repeats
  size_t next_ = 0;              // steps_[0, next_) are AVAILABLE; guarded by guard_->mu
  const int mode_;
  std::shared_ptr<ReactorGuard<WaitReactor>> guard_;
  std::shared_ptr<TrialSubscription> subscription_;
  grpc::Alarm alarm_;
  std::mutex mu_;
  bool completed_ = false;
  MemoryBudget::Reservation memory_;
};

// The shared part of the watches: a subscription to the trial that calls
// PumpLocked after each commit, one write at a time, and the end of the call
// when the client goes away. Subclasses say what to send next (PumpLocked,
// with guard_->mu held): they fill message_, set writing_ and StartWrite (or
// set finished_ and StartWriteAndFinish), or send nothing yet.
template <typename Message>
class TrialWatchReactor : public grpc::ServerWriteReactor<Message> {
 public:
  void OnWriteDone(bool ok) override {
    std::shared_ptr<Guard> self = guard_;
    std::lock_guard<std::mutex> lock(self->mu);
    writing_ = false;
    if (finished_) return;
    if (!ok) {
      finished_ = true;
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    PumpLocked();
  }
  void OnCancel() override {
    std::shared_ptr<Guard> self = guard_;
    std::lock_guard<std::mutex> lock(self->mu);
    if (finished_ || writing_) return;  // a pending write fails and finishes
    finished_ = true;
    this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }
  void OnDone() override {
    std::shared_ptr<Guard> self = guard_;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      self->reactor = nullptr;
      subscription_.reset();  // the watcher slot is free from here
    }
    delete this;
  }

 protected:
  using Guard = ReactorGuard<TrialWatchReactor>;

  explicit TrialWatchReactor(std::shared_ptr<Trial> trial)
      : trial_(std::move(trial)), guard_(std::make_shared<Guard>()) {}
  // Subscribes and sends what is already there; called last by the
  // subclass's constructor (PumpLocked is not callable before).
  void Start() {
    std::shared_ptr<Guard> self = guard_;
    std::lock_guard<std::mutex> lock(self->mu);
    self->reactor = this;
    std::weak_ptr<Guard> weak = guard_;
    auto watch = trial_->Watch([weak] {
      if (auto g = weak.lock()) {
        std::lock_guard<std::mutex> lock(g->mu);
        if (g->reactor != nullptr) g->reactor->PumpLocked();
      }
    });
    if (!watch.ok()) {
      finished_ = true;
      this->Finish(ToGrpcStatus(watch.status(), nullptr));
      return;
    }
    subscription_ = std::move(*watch);
    PumpLocked();
  }
  virtual void PumpLocked() = 0;  // guard_->mu held
  // Ends the watch with TrialNotFound once the trial is deleted (no write
  // pending); true if it did (or the watch is finishing).
  bool EndIfDeletedLocked() {
    if (!trial_->deleted()) return false;
    finished_ = true;
    this->Finish(ToGrpcStatus(trial_->NotFoundError(), nullptr));
    return true;
  }

  const std::shared_ptr<Trial> trial_;
  // Guarded by guard_->mu.
  bool writing_ = false;
  bool finished_ = false;
  Message message_;

 private:
  std::shared_ptr<Guard> guard_;
  std::shared_ptr<TrialSubscription> subscription_;
};

// Sends each newly complete step from `from_step` on, then end_of_trial.
class WatchStepsReactor : public TrialWatchReactor<v1::StepEvent> {
 public:
  WatchStepsReactor(std::shared_ptr<Trial> trial, uint64_t from_step);

 private:
  void PumpLocked() override;

  uint64_t cursor_;  // guarded by guard_->mu
};

// Sends every rule status of the trial, then each change, until cancelled.
class WatchRulesReactor : public TrialWatchReactor<v1::RuleStatus> {
 public:
  explicit WatchRulesReactor(std::shared_ptr<Trial> trial);

 private:
  void PumpLocked() override;

  uint64_t cursor_ =
      0;  // the last rule change sent (Trial::RuleStatusesAfter); guarded by guard_->mu
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_STREAM_REACTORS_H_
