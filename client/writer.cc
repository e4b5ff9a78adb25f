#include "client/writer.h"

#include "client/cluster.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "tensor/dtype.h"

namespace tensorkeep {
namespace client {
namespace {

using Clock = std::chrono::steady_clock;

// Fixed cost counted per record besides its data (bookkeeping, framing), and
// per EndStep (so that end_step calls alone cannot grow the queue unbounded).
constexpr size_t kRecordOverhead = 64;

size_t RecordBytes(const v1::TensorRecord& r) {
  return r.data().size() + r.name().size() + kRecordOverhead;
}

// Failed for want of a collector (not reached, restarted, dropped the
// connection), not because of what the writer sent: worth reconnecting.
// The collector attaches a reason to every refusal that is the writer's doing;
// one whose disk is short of space (STORAGE_FULL) refuses new data until space
// is freed: wait and resend, as for a collector away (as the Python writer's
// _errors.is_transient).
bool IsTransient(const absl::Status& s) {
  const Reason reason = GetReason(s);
  if (reason == Reason::kStorageFull) return true;
  if (reason != Reason::kNone) return false;
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

// A writer that keeps failing to reach its collector says so this often.
constexpr auto kReconnectLogInterval = std::chrono::seconds(30);

Clock::time_point After(double seconds) {
  if (!(seconds < 1e9)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, seconds)));
}

// "0-4, 7, 9-12" (at most `max_ranges` ranges, then "...").
std::string StepRanges(const std::set<uint64_t>& steps, size_t max_ranges = 8) {
  std::vector<std::string> out;
  auto it = steps.begin();
  while (it != steps.end()) {
    if (out.size() == max_ranges) {
      out.push_back("...");
      break;
    }
    const uint64_t first = *it;
    uint64_t last = first;
    while (++it != steps.end() && *it == last + 1) last = *it;
    out.push_back(first == last ? absl::StrCat(first) : absl::StrCat(first, "-", last));
  }
  return absl::StrJoin(out, ", ");
}

}  // namespace

Writer::Writer(const WriterOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Writer>> Writer::Create(const WriterOptions& options) {
  if (options.trial.empty()) return absl::InvalidArgumentError("Writer needs a trial name");
  if (options.worker.empty()) return absl::InvalidArgumentError("Writer needs a worker name");
  if (options.num_workers < 1) return absl::InvalidArgumentError("num_workers must be >= 1");
  if (!(options.retry_timeout_seconds >= 0)) {
    return absl::InvalidArgumentError(
        "retry_timeout_seconds must be >= 0 (infinity: never give up)");
  }
  std::unique_ptr<Writer> w(new Writer(options));
  // A cluster: the collector that holds the trial, else its owner.
  TK_ASSIGN_OR_RETURN(w->connection_, ConnectForTrial(options.server, options.trial,
                                                      options.security, Cluster::Purpose::kWrite));
  return w;
}

absl::StatusOr<std::unique_ptr<Writer>> Writer::Open(const WriterOptions& options,
                                                     double connect_timeout_seconds) {
  TK_ASSIGN_OR_RETURN(std::unique_ptr<Writer> w, Create(options));
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_seconds * 1000));
  if (!w->connection_->channel()->WaitForConnected(deadline)) {
    return absl::UnavailableError(absl::StrCat("cannot reach the collector at ",
                                               w->connection_->address(), " within ",
                                               connect_timeout_seconds, " s"));
  }
  w->runner_ = std::thread([p = w.get()] { p->Run(); });
  return w;
}

absl::StatusOr<std::unique_ptr<Writer>> Writer::OpenInBackground(const WriterOptions& options) {
  TK_ASSIGN_OR_RETURN(std::unique_ptr<Writer> w, Create(options));
  w->runner_ = std::thread([p = w.get()] { p->Run(); });
  return w;
}

Writer::~Writer() {
  bool need_close;
  {
    std::lock_guard<std::mutex> lock(mu_);
    need_close = !close_queued_ && error_.ok() && runner_.joinable();
  }
  if (need_close) {
    absl::Status s = CloseUntil(false, After(kExitCloseSeconds));
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      const std::string unsaved = UnsavedLocked();
      spdlog::warn("tensorkeep writer {} of trial {} destroyed without Close: {}{}",
                   options_.worker, options_.trial, std::string(s.message()),
                   unsaved.empty() || !error_.ok() ? "" : absl::StrCat("; not saved: ", unsaved));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned_ = true;
    if (error_.ok() && !close_acked_) error_ = absl::CancelledError("writer destroyed");
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.notify_all();
  if (runner_.joinable()) runner_.join();
}

std::string Writer::StopReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_reason_;
}

std::string Writer::Unsaved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return UnsavedLocked();
}

std::vector<UnsavedItem> Writer::Abandon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned_ = true;
    if (error_.ok()) error_ = absl::CancelledError("writer abandoned");
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.notify_all();
  if (runner_.joinable()) runner_.join();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<UnsavedItem> out;
  // Built messages first (a chunked record and its Chunk messages are
  // adjacent, and the acknowledgements release them together), then the queue.
  for (const auto& m : pending_) {
    if (m->is_chunk) {
      if (!out.empty() && out.back().kind == UnsavedItem::kRecord) {
        out.back().record.mutable_data()->append(m->request.chunk().data());
      }
      continue;
    }
    switch (m->kind) {
      case Item::kRecord:
        for (const auto& r : m->request.records().records()) {
          UnsavedItem u;
          u.record = r;
          out.push_back(std::move(u));
        }
        break;
      case Item::kEndStep: {
        UnsavedItem u;
        u.kind = UnsavedItem::kEndStep;
        u.step = m->request.end_step().step();
        out.push_back(std::move(u));
        break;
      }
      case Item::kClose: {
        UnsavedItem u;
        u.kind = UnsavedItem::kClose;
        u.end_of_training = m->request.close().end_of_training();
        out.push_back(std::move(u));
        break;
      }
      case Item::kFlush:
        break;
    }
  }
  for (const Item& item : queue_) {
    UnsavedItem u;
    if (item.kind == Item::kRecord) {
      u.record = item.record;
    } else if (item.kind == Item::kEndStep) {
      u.kind = UnsavedItem::kEndStep;
      u.step = item.step;
    } else if (item.kind == Item::kClose) {
      u.kind = UnsavedItem::kClose;
      u.end_of_training = item.end_of_training;
    } else {
      continue;
    }
    out.push_back(std::move(u));
  }
  pending_.clear();
  queue_.clear();
  buffered_bytes_ = 0;
  return out;
}

std::string Writer::UnsavedLocked() const {
  size_t tensors = 0;
  std::set<uint64_t> steps;
  std::vector<std::string> names;
  std::set<std::string> seen;
  int64_t end_step = -1;
  const auto add = [&](const v1::TensorRecord& r) {
    ++tensors;
    steps.insert(r.step());
    if (seen.insert(r.name()).second && names.size() < 6) names.push_back(QuoteInput(r.name(), 60));
  };
  for (const auto& m : pending_) {
    for (const auto& r : m->request.records().records()) add(r);
    if (m->kind == Item::kEndStep)
      end_step = std::max<int64_t>(end_step, m->request.end_step().step());
  }
  for (const auto& item : queue_) {
    if (item.kind == Item::kRecord) add(item.record);
    if (item.kind == Item::kEndStep) end_step = std::max<int64_t>(end_step, item.step);
  }
  if (tensors == 0 && end_step < 0) return "";
  std::string out;
  if (tensors > 0) {
    absl::StrAppend(&out, tensors, tensors == 1 ? " tensor" : " tensors", " at ",
                    steps.size() == 1 ? "step " : "steps ", StepRanges(steps), " (",
                    absl::StrJoin(names, ", "),
                    seen.size() > names.size()
                        ? absl::StrCat(" and ", seen.size() - names.size(), " more names")
                        : "",
                    ")");
  }
  if (end_step >= 0) {
    absl::StrAppend(&out, out.empty() ? "" : ", and ", "the end of step ", end_step);
  }
  return out;
}

void Writer::Fail(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    const std::string unsaved = UnsavedLocked();
    if (unsaved.empty()) {
      error_ = status;
    } else {
      const std::string message = absl::StrCat(status.message(), "; not saved: ", unsaved);
      const Reason reason = GetReason(status);
      error_ = reason != Reason::kNone ? MakeError(reason, message)
                                       : absl::Status(status.code(), message);
    }
    spdlog::error("tensorkeep writer {} of trial {} failed: {}", options_.worker, options_.trial,
                  std::string(error_.message()));
  }
  cv_.notify_all();
}

absl::Status Writer::Enqueue(Item item) {
  uint64_t ticket = 0;
  TK_RETURN_IF_ERROR(EnqueueUntil(&item, Clock::time_point::max(), &ticket));
  if (ticket == 0) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  return WaitFor(
      lock, [&] { return flushed_ticket_ >= ticket; }, Clock::time_point::max());
}

absl::Status Writer::EnqueueUntil(Item* in, Clock::time_point deadline, uint64_t* ticket_out) {
  std::unique_lock<std::mutex> lock(mu_);
  // A record larger than the whole buffer still goes through, alone; a
  // control item without bytes (a Flush) never waits for room.
  const auto has_room = [&] {
    return !error_.ok() || close_queued_ || buffered_bytes_ == 0 || in->bytes == 0 ||
           buffered_bytes_ + in->bytes <= options_.max_buffered_bytes;
  };
  if (!has_room()) {
    if (!queue_.empty() && !send_all_) {
      send_all_ = true;  // full: what lingers in the queue goes now
      cv_.notify_all();
    }
    if (!cv_.wait_until(lock, deadline, has_room)) {
      return absl::DeadlineExceededError("the writer's buffer stayed full");
    }
  }
  if (!error_.ok()) return error_;
  if (close_queued_) return absl::FailedPreconditionError("writer is closed");
  Item item = std::move(*in);
  buffered_bytes_ += item.bytes;
  if (item.kind == Item::kFlush) item.ticket = ++flush_tickets_;
  if (item.kind == Item::kClose) close_queued_ = true;
  const uint64_t ticket = item.ticket;
  *ticket_out = ticket;
  // The stream thread waits only on an empty queue: wake it only then (a
  // wake-up per record was a futex call per record).
  const bool was_empty = queue_.empty();
  const size_t queued_before = queued_record_bytes_;
  const bool control = item.kind != Item::kRecord;
  if (was_empty) queued_since_ = Clock::now();
  if (control) {
    ++queued_controls_;
  } else {
    queued_record_bytes_ += item.bytes;
  }
  queue_.push_back(std::move(item));
  lock.unlock();
  // ... or when a lingering queue is to go now (a control item, a message's worth).
  if (ticket != 0 || was_empty ||
      (options_.linger_seconds > 0 &&
       (control || (queued_before < options_.message_bytes &&
                    queued_record_bytes_ >= options_.message_bytes)))) {
    cv_.notify_all();
  }
  return absl::OkStatus();
}

absl::Status Writer::WaitFor(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                             Clock::time_point deadline) {
  const bool in_time = cv_.wait_until(lock, deadline, [&] { return done() || !error_.ok(); });
  if (done()) return absl::OkStatus();
  if (!error_.ok()) return error_;
  (void)in_time;
  return absl::DeadlineExceededError("the collector did not acknowledge in time");
}

absl::Status Writer::Validate(v1::TensorRecord* record) {
  if (record->name().empty()) return absl::InvalidArgumentError("tensor name is empty");
  if (record->mode() < 1 || record->mode() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", record->name(), "': unknown mode ", record->mode()));
  }
  if (record->has_value()) {
    if (!IsValidDType(record->dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", record->name(), "': unknown dtype ", record->dtype()));
    }
    record->set_value_size(record->data().size());
    TK_RETURN_IF_ERROR(
        CheckValueSize(static_cast<DType>(record->dtype()),
                       absl::Span<const int64_t>(record->shape().data(), record->shape_size()),
                       record->data().size()));
  } else if (!record->data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", record->name(), "': data given but has_value is false"));
  }
  return absl::OkStatus();
}

absl::Status Writer::Write(v1::TensorRecord record) {
  TK_RETURN_IF_ERROR(Validate(&record));
  Item item{Item::kRecord, std::move(record)};
  item.bytes = RecordBytes(item.record);
  return Enqueue(std::move(item));
}

absl::Status Writer::TryWrite(v1::TensorRecord* record, Clock::time_point deadline) {
  Item item{Item::kRecord};
  item.record.Swap(record);
  item.bytes = RecordBytes(item.record);
  uint64_t ticket = 0;
  const absl::Status s = EnqueueUntil(&item, deadline, &ticket);
  if (!s.ok()) record->Swap(&item.record);  // not taken: the caller keeps it
  return s;
}

absl::Status Writer::TryEndStep(uint64_t step, Clock::time_point deadline) {
  Item item{Item::kEndStep};
  item.step = step;
  item.bytes = kRecordOverhead;
  uint64_t ticket = 0;
  return EnqueueUntil(&item, deadline, &ticket);
}

absl::StatusOr<uint64_t> Writer::RequestFlush() {
  Item item{Item::kFlush};
  uint64_t ticket = 0;
  TK_RETURN_IF_ERROR(EnqueueUntil(&item, Clock::time_point::max(), &ticket));
  return ticket;
}

bool Writer::Flushed(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(mu_);
  return flushed_ticket_ >= ticket;
}

absl::Status Writer::WaitFlushed(uint64_t ticket, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return WaitFor(
      lock, [&] { return flushed_ticket_ >= ticket; }, deadline);
}

absl::Status Writer::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

absl::Status Writer::EndStep(uint64_t step) {
  Item item{Item::kEndStep};
  item.step = step;
  item.bytes = kRecordOverhead;
  return Enqueue(std::move(item));
}

absl::Status Writer::Flush() { return Enqueue(Item{Item::kFlush}); }

absl::Status Writer::Close(bool end_of_training) {
  return CloseUntil(end_of_training, Clock::time_point::max());
}

absl::Status Writer::CloseUntil(bool end_of_training, Clock::time_point deadline) {
  bool queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = close_queued_;
  }
  if (!queued) {
    Item item{Item::kClose};
    item.end_of_training = end_of_training;
    TK_RETURN_IF_ERROR(Enqueue(std::move(item)));
  }
  absl::Status s;
  {
    std::unique_lock<std::mutex> lock(mu_);
    s = WaitFor(
        lock, [&] { return close_acked_; }, deadline);
  }
  // The stream thread ends once the collector has ended the closed stream.
  if (s.ok() && runner_.joinable()) runner_.join();
  return s;
}

// ---------------------------------------------------------------------------
// The stream thread

void Writer::Run() {
  ReconnectBackoff backoff(options_.backoff_first_seconds, options_.backoff_max_seconds);
  Clock::time_point failing_since = Clock::now();
  Clock::time_point last_warned{};
  uint64_t failed_tries = 0;  // since the last stream that reached a collector
  for (uint64_t gen = 1;; ++gen) {
    grpc::ClientContext context;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abandoned_ || !error_.ok()) return;
      gen_ = gen;
      streams_opened_.store(gen);
      stream_ended_ = false;
      stream_acked_ = false;
      stream_status_ = absl::OkStatus();
      context_ = &context;
    }
    auto stream = connection_->stub()->Push(&context);
    std::thread reader([&] { ReadAcks(gen, stream.get(), &context); });
    Stream(gen, stream.get());
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abandoned_) context.TryCancel();
    }
    reader.join();
    absl::Status status;
    bool acked;
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = nullptr;
      if (close_acked_ || abandoned_ || !error_.ok()) return;
      status = stream_status_;
      acked = stream_acked_;
    }
    const auto now = Clock::now();
    if (acked) {
      // The stream reached a collector (it acks the Flush that follows Open):
      // the failure starts now.
      backoff.Reset();
      failing_since = now;
      failed_tries = 0;
    }
    if (!IsTransient(status)) {
      Fail(status);
      return;
    }
    const double failing = std::chrono::duration<double>(now - failing_since).count();
    if (failing >= options_.retry_timeout_seconds) {
      Fail(absl::UnavailableError(
          absl::StrCat("gave up reconnecting to the collector at ", connection_->address(),
                       " after ", options_.retry_timeout_seconds,
                       " s (WriterOptions::retry_timeout_seconds): ", status.message())));
      return;
    }
    const double wait = std::min(backoff.Next(), options_.retry_timeout_seconds - failing);
    // One line when the trouble starts, then one every kReconnectLogInterval
    // (a writer that never gives up may retry for hours); each try at debug.
    ++failed_tries;
    const bool first = failed_tries == 1;
    if (first || now - last_warned >= kReconnectLogInterval) {
      last_warned = now;
      spdlog::warn("tensorkeep writer {} of trial {}: {}; reconnecting in {:.2f} s{}",
                   options_.worker, options_.trial, std::string(status.message()), wait,
                   first ? "" : absl::StrCat(" (unreachable for ", static_cast<int64_t>(failing),
                                             " s, ", failed_tries, " tries)"));
    } else {
      spdlog::debug("tensorkeep writer {} of trial {}: {}; reconnecting in {:.2f} s",
                    options_.worker, options_.trial, std::string(status.message()), wait);
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, After(wait), [&] { return abandoned_; })) return;
  }
}

void Writer::Stream(uint64_t gen,
                    grpc::ClientReaderWriter<v1::PushRequest, v1::PushResponse>* stream) {
  {
    // Open, then a Flush: its ack tells that the stream reached a collector.
    v1::PushRequest open;
    open.set_seq(1);
    open.mutable_open()->set_trial(options_.trial);
    open.mutable_open()->set_worker(options_.worker);
    open.mutable_open()->set_num_workers(options_.num_workers);
    // Later streams resume: a trial this writer's own close ended (its
    // acknowledgement lost with the connection) still takes their resend.
    open.mutable_open()->set_resume(gen > 1);
    open.mutable_open()->set_unpublished(options_.unpublished);
    open.mutable_open()->set_attempt(options_.attempt);
    if (!stream->Write(open)) return;
    v1::PushRequest flush;
    flush.set_seq(2);
    flush.mutable_flush();
    if (!stream->Write(flush)) return;
  }
  uint64_t seq = 2;
  uint64_t id;
  {
    // Every unacknowledged message again, in order, with new seqs.
    std::lock_guard<std::mutex> lock(mu_);
    id = pending_.empty() ? next_id_ : pending_.front()->id;
  }
  for (;;) {
    std::shared_ptr<Message> m = NextMessage(gen, id);
    if (m == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      m->request.set_seq(++seq);
      m->gen = gen;
      m->seq = seq;
    }
    // Another thread may read the message while it is written (naming what
    // is unsaved), never change it.
    if (!stream->Write(m->request)) return;
    id = m->id + 1;
    if (m->kind == Item::kClose) {
      stream->WritesDone();
      return;
    }
  }
}

std::shared_ptr<Writer::Message> Writer::NextMessage(uint64_t gen, uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (abandoned_ || gen_ != gen || stream_ended_) return nullptr;
    if (!pending_.empty() && pending_.back()->id >= id) {
      return pending_[id - pending_.front()->id];
    }
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    if (options_.linger_seconds > 0 && queued_controls_ == 0 && !send_all_ &&
        queued_record_bytes_ < options_.message_bytes) {
      const auto until =
          queued_since_ + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(options_.linger_seconds));
      if (Clock::now() < until) {
        cv_.wait_until(lock, until);
        continue;
      }
    }
    std::vector<Item> items = TakeBatchLocked();
    if (queue_.empty()) send_all_ = false;
    lock.unlock();
    std::vector<std::shared_ptr<Message>> built = Build(std::move(items));
    lock.lock();
    for (auto& m : built) {
      m->id = next_id_++;
      pending_.push_back(std::move(m));
    }
  }
}

Writer::Item Writer::PopLocked() {
  Item item = std::move(queue_.front());
  queue_.pop_front();
  if (item.kind == Item::kRecord) {
    queued_record_bytes_ -= std::min(queued_record_bytes_, item.bytes);
  } else {
    --queued_controls_;
  }
  return item;
}

std::vector<Writer::Item> Writer::TakeBatchLocked() {
  std::vector<Item> items;
  items.push_back(PopLocked());
  if (items[0].kind != Item::kRecord) return items;
  const auto fits_alone = [&](const Item& it) {
    return it.kind == Item::kRecord && it.record.data().size() <= options_.chunk_bytes;
  };
  size_t size = items[0].bytes;
  // A value larger than a chunk goes alone (its record, then Chunk messages).
  const bool large = !fits_alone(items[0]);
  while (!large && !queue_.empty() && fits_alone(queue_.front()) &&
         size + queue_.front().bytes <= options_.message_bytes) {
    size += queue_.front().bytes;
    items.push_back(PopLocked());
  }
  // Whole queued steps are coalesced: after a step's records and its
  // EndStep, the next step's records join the message when that step's
  // EndStep is queued too (a step still being written is never sent early),
  // and the last EndStep follows the records as one EndStep message. The
  // collector's outcome is the same: a record of a later step commits the
  // steps before it, and EndStep(s) every step <= s. A writer that fell
  // behind then sends many small steps as two messages, not two a step.
  // (The Python writer's _take_batch does the same.)
  Item end{Item::kEndStep};
  end.end_steps = 0;
  while (options_.coalesce_steps && !large && !queue_.empty() &&
         queue_.front().kind == Item::kEndStep && size <= options_.message_bytes) {
    end.step = std::max(end.step, queue_.front().step);
    end.end_steps += queue_.front().end_steps;
    end.bytes += queue_.front().bytes;
    PopLocked();
    size_t k = 0, extra = 0;
    bool fit = true;
    for (const Item& it : queue_) {
      if (it.kind != Item::kRecord) break;
      fit = fit && fits_alone(it);
      extra += it.bytes;
      ++k;
    }
    if (k == 0 || k >= queue_.size() || queue_[k].kind != Item::kEndStep || !fit ||
        size + extra > options_.message_bytes) {
      continue;  // (a following EndStep is still taken; records are not)
    }
    for (size_t i = 0; i < k; ++i) {
      items.push_back(PopLocked());
    }
    size += extra;
  }
  if (end.end_steps > 0) items.push_back(std::move(end));
  return items;
}

std::vector<std::shared_ptr<Writer::Message>> Writer::Build(std::vector<Item> items) {
  std::vector<std::shared_ptr<Message>> out;
  const auto message = [&](Item::Kind kind, size_t bytes) {
    auto m = std::make_shared<Message>();
    m->kind = kind;
    m->bytes = bytes;
    out.push_back(m);
    return m.get();
  };
  Item& first = items[0];
  switch (first.kind) {
    case Item::kEndStep:
      message(Item::kEndStep, first.bytes)->request.mutable_end_step()->set_step(first.step);
      return out;
    case Item::kFlush: {
      unflushed_bytes_ = 0;
      Message* m = message(Item::kFlush, 0);
      m->request.mutable_flush();
      m->ticket = first.ticket;
      return out;
    }
    case Item::kClose:
      message(Item::kClose, 0)->request.mutable_close()->set_end_of_training(first.end_of_training);
      return out;
    case Item::kRecord:
      break;
  }
  std::optional<Item> end;
  if (items.back().kind == Item::kEndStep) {
    end = std::move(items.back());
    items.pop_back();
  }
  if (items.size() == 1 && first.record.data().size() > options_.chunk_bytes) {
    // The record carries the first chunk, Chunk messages the rest; its bytes
    // are released when the last of them is acknowledged.
    std::string data = std::move(*first.record.mutable_data());
    first.record.set_data(data.substr(0, options_.chunk_bytes));
    Message* m = message(Item::kRecord, first.bytes);
    *m->request.mutable_records()->add_records() = std::move(first.record);
    m->chunks_follow = true;
    for (size_t offset = options_.chunk_bytes; offset < data.size();
         offset += options_.chunk_bytes) {
      Message* c = message(Item::kRecord, 0);
      c->is_chunk = true;
      c->request.mutable_chunk()->set_data(
          data.substr(offset, std::min(options_.chunk_bytes, data.size() - offset)));
    }
  } else {
    size_t bytes = 0;
    for (const Item& it : items) bytes += it.bytes;
    Message* m = message(Item::kRecord, bytes);
    auto* records = m->request.mutable_records()->mutable_records();
    records->Reserve(static_cast<int>(items.size()));
    for (Item& it : items) *records->Add() = std::move(it.record);
  }
  if (end.has_value()) {
    message(Item::kEndStep, end->bytes)->request.mutable_end_step()->set_step(end->step);
  }
  if (options_.auto_flush_bytes > 0) {
    for (const auto& m : out) unflushed_bytes_ += m->bytes;
    if (unflushed_bytes_ >= std::min(options_.auto_flush_bytes, options_.max_buffered_bytes / 2)) {
      unflushed_bytes_ = 0;
      message(Item::kFlush, 0)->request.mutable_flush();  // ticket 0: no caller waits
    }
  }
  return out;
}

void Writer::ReadAcks(uint64_t gen,
                      grpc::ClientReaderWriter<v1::PushRequest, v1::PushResponse>* stream,
                      grpc::ClientContext* context) {
  v1::PushResponse ack;
  while (stream->Read(&ack)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stream_acked_ && gen > 1) reconnects_.fetch_add(1);
      stream_acked_ = true;
      const uint64_t acked = ack.acked_seq();
      while (!pending_.empty()) {
        const Message& front = *pending_.front();
        if (front.gen != gen || front.seq > acked) break;
        size_t n = 1;
        if (front.chunks_follow) {
          // A record is released with its last chunk: were its first
          // messages dropped, a resend would start with a Chunk. (The
          // collector never acknowledges a partial record.)
          while (n < pending_.size() && pending_[n]->is_chunk) ++n;
          const Message& last = *pending_[n - 1];
          if (last.gen != gen || last.seq > acked) break;
        }
        for (size_t i = 0; i < n; ++i) {
          const Message& m = *pending_.front();
          buffered_bytes_ -= std::min(buffered_bytes_, m.bytes);
          if (m.kind == Item::kFlush) flushed_ticket_ = std::max(flushed_ticket_, m.ticket);
          if (m.kind == Item::kClose) close_acked_ = true;
          pending_.pop_front();
        }
      }
      if (ack.stop_requested()) stop_reason_ = ack.stop_reason();
      // Under the lock: a Flush that returns sees the state its ack brought.
      committed_through_.store(ack.committed_through());
      if (ack.stop_requested()) stop_requested_.store(true);
    }
    cv_.notify_all();
  }
  grpc::Status status = stream->Finish();
  absl::Status s = FromGrpc(status, context, *connection_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ok() && !close_acked_) {
      s = absl::UnavailableError("the collector ended the Push stream before the writer closed");
    }
    stream_ended_ = true;
    stream_status_ = s;
  }
  cv_.notify_all();
}

}  // namespace client
}  // namespace tensorkeep
