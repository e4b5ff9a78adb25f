#include "server/stream_reactors.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/errors.h"
#include "server/grpc_status.h"

namespace tensorkeep {

// ---------------------------------------------------------------- values

ValueStreamReactor::ValueStreamReactor(grpc::CallbackServerContext* context, Collector* collector,
                                       std::shared_ptr<Trial> trial, std::string tensor,
                                       std::vector<Trial::Located> where, bool packed)
    : context_(context),
      collector_(collector),
      trial_(std::move(trial)),
      tensor_(std::move(tensor)),
      where_(std::move(where)),
      packed_(packed) {
  header_sent_ = true;  // no current value yet
  ScheduleNext();
}

void ValueStreamReactor::ScheduleNext() {
  // Reading values (a pread, a decode) is the executor's work, not a
  // reaction's. One task or one write is outstanding at a time, so the state
  // below is never touched by two threads at once.
  absl::Status queued = collector_->executor()->Schedule([this] { Next(); });
  if (!queued.ok()) Finish(ToGrpcStatus(queued, context_));
}

namespace {

// The reads of one ReadAhead, shared with the helper task (which may run
// after the reactor is gone: it holds this, the trial, nothing of the call).
struct ReadAheadJob {
  Collector* collector;
  std::shared_ptr<Trial> trial;
  std::string tensor;
  std::vector<Trial::Located> where;
  std::vector<std::optional<absl::StatusOr<Collector::Value>>> out;
  std::atomic<size_t> next{0};
  std::atomic<size_t> bytes{0};  // of small values loaded
  absl::Mutex mu;
  size_t done ABSL_GUARDED_BY(mu) = 0;

  // Reads values until none is left to take.
  void Work() {
    for (size_t i = next.fetch_add(1); i < where.size(); i = next.fetch_add(1)) {
      absl::StatusOr<Collector::Value> v = collector->ReadRecord(*trial, tensor, where[i]);
      if (v.ok() && !v->data_loaded && v->meta.has_value() && v->meta.value_size() <= kChunkBytes) {
        // Small values' bytes too, up to kBatchBytes; the rest are read when
        // their turn comes, as without read-ahead.
        const size_t size = v->meta.value_size();
        if (bytes.fetch_add(size) + size <= kBatchBytes) {
          absl::Status loaded = collector->LoadValue(*trial, &*v);
          if (!loaded.ok()) v = loaded;
        } else {
          bytes.fetch_sub(size);
        }
      }
      absl::MutexLock lock(&mu);
      out[i] = std::move(v);
      ++done;
    }
  }
};

}  // namespace

void ValueStreamReactor::ReadAhead() {
  const size_t n = std::min(kReadAheadValues, where_.size() - next_value_);
  auto job = std::make_shared<ReadAheadJob>();
  job->collector = collector_;
  job->trial = trial_;
  job->tensor = tensor_;
  job->where.assign(where_.begin() + next_value_, where_.begin() + next_value_ + n);
  job->out.resize(n);
  // A full queue only means this thread reads them all.
  if (n > 1) collector_->executor()->Schedule([job] { job->Work(); }).IgnoreError();
  job->Work();
  {
    absl::MutexLock lock(&job->mu);
    job->mu.Await(absl::Condition(
        +[](ReadAheadJob* j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(j->mu) { return j->done == j->out.size(); },
        job.get()));
  }
  size_t bytes = 0;
  for (auto& v : job->out) {
    if (v->ok() && (*v)->data_loaded) bytes += (*v)->data.size();
    ready_.push_back(std::move(*v));
  }
  ready_held_ = collector_->memory()->Hold(bytes);
}

bool ValueStreamReactor::LoadNext() {
  if (next_value_ >= where_.size()) {
    Finish(grpc::Status::OK);
    return false;
  }
  if (ready_.empty()) ReadAhead();
  absl::StatusOr<Collector::Value> record = std::move(ready_.front());
  ready_.pop_front();
  ++next_value_;
  if (ready_.empty()) ready_held_.Release();
  if (!record.ok()) return Fail(record.status());
  current_ = std::move(*record);
  reader_.reset();
  if (!current_.data_loaded && current_.meta.has_value() &&
      current_.meta.value_size() > kChunkBytes) {
    // Streamed from the store piece by piece: a call never holds more than
    // one chunk of a large value, however slowly its client reads.
    auto reader = collector_->OpenValue(*trial_, current_);
    if (!reader.ok()) return Fail(reader.status());
    reader_ = *std::move(reader);
    total_ = reader_->size();
  } else {
    absl::Status loaded = collector_->LoadValue(*trial_, &current_);
    if (!loaded.ok()) return Fail(loaded);
    total_ = current_.data.size();
  }
  offset_ = 0;
  header_sent_ = false;
  return true;
}

bool ValueStreamReactor::Fail(const absl::Status& status) {
  // A value that vanished with its deleted trial: the trial is not found.
  Finish(ToGrpcStatus(trial_ != nullptr && trial_->deleted() ? trial_->NotFoundError() : status,
                      context_));
  return false;
}

bool ValueStreamReactor::ReadPiece(size_t n, std::string* out) {
  if (reader_ != nullptr) {
    absl::Status read = reader_->Read(n, out);
    if (!read.ok()) return Fail(read);
  } else {
    out->assign(current_.data, offset_, n);
  }
  offset_ += n;
  // What the call holds until the message is sent counts in the budget.
  held_ = collector_->memory()->Hold(out->size());
  return true;
}

void ValueStreamReactor::EmitWhole(v1::TensorValue* v) {
  const auto& w = current_.where;
  v->set_header(true);
  v->set_step(w.global_step);
  v->set_mode(static_cast<v1::Mode>(w.info.mode));
  v->set_mode_step(w.info.mode_step);
  v->set_worker(w.worker);
  v->set_dtype(current_.meta.dtype());
  *v->mutable_shape() = current_.meta.shape();
  v->set_value_size(total_);
  header_sent_ = true;
  if (total_ <= kChunkBytes) {
    offset_ = total_;
    *v->mutable_data() = std::move(current_.data);  // no copy
    current_.data.clear();
  }
}

bool ValueStreamReactor::Pack(size_t values_left) {
  const auto& w = current_.where;
  const auto& shape = current_.meta.shape();
  if (w.worker != message_.worker() || static_cast<int>(w.info.mode) != message_.mode() ||
      current_.meta.dtype() != message_.dtype() || total_ != message_.value_size() ||
      shape.size() != message_.shape_size() ||
      !std::equal(shape.begin(), shape.end(), message_.shape().begin())) {
    return false;
  }
  std::string* data = message_.mutable_data();
  if (message_.packed_steps_size() == 0) {
    // Room for as many of the values left as fit in a message: no regrowth.
    const size_t fit = std::min(kBatchBytes / std::max<size_t>(total_, 1), values_left + 1);
    data->reserve(std::min(kBatchBytes, data->size() + fit * total_));
  }
  data->append(current_.data);
  message_.add_packed_steps(w.global_step);
  message_.add_packed_mode_steps(w.info.mode_step);
  current_.data.clear();
  header_sent_ = true;
  offset_ = total_;
  return true;
}

void ValueStreamReactor::Next() {
  // Move on to the next value when the current one is fully sent.
  if (header_sent_ && offset_ >= total_) {
    if (!LoadNext()) return;
  }
  message_.Clear();
  held_.Release();
  if (!header_sent_) {
    EmitWhole(&message_);
    if (offset_ == 0) {
      // Larger than a chunk: the header carries the first chunk.
      if (!ReadPiece(std::min(kChunkBytes, total_), message_.mutable_data())) return;
      Send();
      return;
    }
    // Pack following small values into the same message.
    size_t bytes = message_.data().size();
    while (bytes < kBatchBytes && next_value_ < where_.size()) {
      if (!LoadNext()) return;
      if (bytes + total_ > kBatchBytes) break;  // goes in the next message
      if (packed_) {
        // Unlike values start the next message.
        if (!Pack(where_.size() - next_value_)) break;
        bytes += total_ + 16;
        continue;
      }
      v1::TensorValue* v = message_.add_batched();
      EmitWhole(v);
      bytes += v->data().size() + 64;
    }
    Send();
    return;
  }
  if (!ReadPiece(std::min(kChunkBytes, total_ - offset_), message_.mutable_data())) return;
  Send();
}

void ValueStreamReactor::Send() {
  const bool last = header_sent_ && offset_ >= total_ && next_value_ >= where_.size();
  if (last) {
    StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
  } else {
    StartWrite(&message_);
  }
}

void ValueStreamReactor::OnWriteDone(bool ok) {
  if (!ok) {
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    return;
  }
  ScheduleNext();
}

// ---------------------------------------------------------------- wait

WaitReactor::WaitReactor(grpc::CallbackServerContext* context, std::shared_ptr<Trial> trial,
                         std::vector<uint64_t> steps, int mode, double timeout_seconds,
                         MemoryBudget::Reservation memory)
    : context_(context),
      trial_(std::move(trial)),
      steps_(std::move(steps)),
      mode_(mode),
      guard_(std::make_shared<ReactorGuard<WaitReactor>>()),
      memory_(std::move(memory)) {
  std::sort(steps_.begin(), steps_.end());
  steps_.erase(std::unique(steps_.begin(), steps_.end()), steps_.end());
  // Callbacks registered below wait on the guard until construction is done.
  // (A local copy keeps the guard's mutex alive past the unlock.)
  std::shared_ptr<ReactorGuard<WaitReactor>> self = guard_;
  std::lock_guard<std::mutex> lock(self->mu);
  guard_->reactor = this;
  std::weak_ptr<ReactorGuard<WaitReactor>> weak = guard_;
  auto through_guard = [weak](auto fn) {
    if (auto g = weak.lock()) {
      std::lock_guard<std::mutex> lock(g->mu);
      if (g->reactor != nullptr) fn(g->reactor);
    }
  };
  auto watch =
      trial_->Watch([through_guard] { through_guard([](WaitReactor* r) { r->Check(); }); });
  if (!watch.ok()) {
    Complete(watch.status());
    return;
  }
  subscription_ = std::move(*watch);
  // Longer than kMaxWaitSeconds (or infinite) waits without limit like 0: in
  // microseconds it would overflow the clock and time out at once.
  if (timeout_seconds > 0 && timeout_seconds <= kMaxWaitSeconds) {
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::microseconds(static_cast<int64_t>(timeout_seconds * 1e6));
    std::shared_ptr<ReactorGuard<WaitReactor>> g = guard_;
    alarm_.Set(deadline, [g, timeout_seconds](bool fired) {
      if (!fired) return;
      std::lock_guard<std::mutex> lock(g->mu);
      if (g->reactor != nullptr) {
        g->reactor->Complete(MakeError(
            Reason::kTimeout, absl::StrCat("steps not available within ", timeout_seconds, " s")));
      }
    });
  }
  Check();
}

void WaitReactor::Check() {
  if (trial_->deleted()) {
    Complete(trial_->NotFoundError());
    return;
  }
  // Steps are decided in ascending order (a step is complete when a later one
  // is), so only the lowest undecided one is looked at: a wake costs the
  // steps it decided, not the list.
  while (next_ < steps_.size()) {
    const uint64_t step = steps_[next_];
    switch (trial_->HasPassedStep(step, mode_)) {
      case StepState::kAvailable:
        ++next_;
        break;
      case StepState::kUnavailable: {
        // After the end, a step beyond the last one of its mode (a mode step
        // for TRAIN/EVAL/PREDICT) is "no more data", whatever the mode: a loop
        // over mode steps that skips StepUnavailable stops on NoMoreData.
        const std::optional<uint64_t> last = trial_->LastStep(mode_);
        if (trial_->ended() && (!last.has_value() || step > *last)) {
          Complete(MakeError(Reason::kNoMoreData,
                             last.has_value()
                                 ? absl::StrCat("trial '", trial_->name(), "' ended before ",
                                                StepText(step, mode_), "; its last ",
                                                ModeName(mode_), " step is ", *last)
                                 : absl::StrCat("trial '", trial_->name(), "' ended before ",
                                                StepText(step, mode_), " without saving any ",
                                                ModeName(mode_), " step")));
        } else {
          Complete(MakeError(Reason::kStepUnavailable,
                             absl::StrCat(ModeName(mode_), " step ", step,
                                          " was not saved in trial '", trial_->name(), "'")));
        }
        return;
      }
      case StepState::kNotYetAvailable:
        return;
    }
  }
  Complete(absl::OkStatus());
}

void WaitReactor::Complete(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completed_) return;
    completed_ = true;
  }
  alarm_.Cancel();
  // Nothing to wait for any more: free the watcher slot now, not at OnDone.
  // (Under guard_->mu, as every caller; a racing notification finds
  // completed_ set.)
  subscription_.reset();
  Finish(ToGrpcStatus(status, context_));
}

void WaitReactor::OnCancel() {
  std::shared_ptr<ReactorGuard<WaitReactor>> self = guard_;
  std::lock_guard<std::mutex> lock(self->mu);
  Complete(absl::CancelledError("wait cancelled"));
}

void WaitReactor::OnDone() {
  std::shared_ptr<ReactorGuard<WaitReactor>> self = guard_;
  {
    std::lock_guard<std::mutex> lock(self->mu);
    self->reactor = nullptr;
  }
  delete this;
}

// ---------------------------------------------------------------- watch steps
//
// Every entry point of a watch (TrialWatchReactor::Start, the subscription
// callback, OnWriteDone, OnCancel) runs under the guard's mutex, and OnDone
// takes it before deleting the reactor: so no entry point can see the reactor
// deleted under it.

WatchStepsReactor::WatchStepsReactor(std::shared_ptr<Trial> trial, uint64_t from_step)
    : TrialWatchReactor(std::move(trial)), cursor_(from_step) {
  Start();
}

void WatchStepsReactor::PumpLocked() {
  if (writing_ || finished_ || EndIfDeletedLocked()) return;
  auto next = trial_->CompleteStepsFrom(cursor_, 1);
  message_.Clear();
  if (!next.empty()) {
    message_.set_step(next[0].first);
    message_.set_mode(static_cast<v1::Mode>(next[0].second.mode));
    message_.set_mode_step(next[0].second.mode_step);
    trial_->DescribeStep(next[0].first, &message_);
    cursor_ = next[0].first + 1;
    writing_ = true;
    StartWrite(&message_);
    return;
  }
  if (trial_->ended()) {
    // Every step is complete after the end, so none is left to send.
    message_.set_end_of_trial(true);
    finished_ = true;
    StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
  }
}

// ---------------------------------------------------------------- watch rules

WatchRulesReactor::WatchRulesReactor(std::shared_ptr<Trial> trial)
    : TrialWatchReactor(std::move(trial)) {
  Start();
}

void WatchRulesReactor::PumpLocked() {
  if (writing_ || finished_ || EndIfDeletedLocked()) return;
  auto next = trial_->RuleStatusesAfter(cursor_, 1);
  if (next.empty()) return;
  cursor_ = next[0].first;
  message_ = std::move(next[0].second);
  writing_ = true;
  StartWrite(&message_);
}

}  // namespace tensorkeep
