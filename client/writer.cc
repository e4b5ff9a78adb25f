#include "client/writer.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/dtype.h"

namespace tensorkeep {
namespace client {

Writer::Writer(const WriterOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Writer>> Writer::Open(const WriterOptions& options,
                                                     double connect_timeout_seconds) {
  if (options.trial.empty()) return absl::InvalidArgumentError("Writer needs a trial name");
  if (options.worker.empty()) return absl::InvalidArgumentError("Writer needs a worker name");
  if (options.num_workers < 1) return absl::InvalidArgumentError("num_workers must be >= 1");
  std::unique_ptr<Writer> w(new Writer(options));
  TK_ASSIGN_OR_RETURN(w->connection_, Connection::Open(ResolveServer(options.server)));
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_seconds * 1000));
  if (!w->connection_->channel()->WaitForConnected(deadline)) {
    return absl::UnavailableError(absl::StrCat("cannot reach the collector at ",
                                               w->connection_->address(), " within ",
                                               connect_timeout_seconds, " s"));
  }
  w->stream_ = w->connection_->stub()->Push(&w->context_);
  v1::PushRequest open;
  open.mutable_open()->set_trial(options.trial);
  open.mutable_open()->set_worker(options.worker);
  open.mutable_open()->set_num_workers(options.num_workers);
  if (!w->Send(open, 0)) {
    return absl::UnavailableError(absl::StrCat("cannot open a Push stream to ",
                                               w->connection_->address()));
  }
  w->acker_ = std::thread([p = w.get()] { p->AckLoop(); });
  w->sender_ = std::thread([p = w.get()] { p->SendLoop(); });
  return w;
}

Writer::~Writer() {
  bool need_close;
  {
    std::lock_guard<std::mutex> lock(mu_);
    need_close = !closed_ && error_.ok();
  }
  if (need_close) (void)Close(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    if (error_.ok()) error_ = absl::CancelledError("writer destroyed");
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  if (acker_.joinable()) {
    context_.TryCancel();
    acker_.join();
  }
}

std::string Writer::StopReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_reason_;
}

void Writer::Fail(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = status;
  }
  cv_.notify_all();
}

absl::Status Writer::Enqueue(Item item, size_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  // A record larger than the whole buffer still goes through, alone.
  cv_.wait(lock, [&] {
    return !error_.ok() || closed_ || buffered_bytes_ == 0 ||
           buffered_bytes_ + bytes <= options_.max_buffered_bytes;
  });
  if (!error_.ok()) return error_;
  if (closed_) return absl::FailedPreconditionError("writer is closed");
  buffered_bytes_ += bytes;
  // The sender waits only on an empty queue: wake it only then (a wake-up
  // per record was a futex call per record).
  const bool was_empty = queue_.empty();
  queue_.push_back(std::move(item));
  lock.unlock();
  if (was_empty) cv_.notify_all();
  return absl::OkStatus();
}

absl::Status Writer::Write(v1::TensorRecord record) {
  if (record.name().empty()) return absl::InvalidArgumentError("tensor name is empty");
  if (record.mode() < 1 || record.mode() > 4) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", record.name(), "': unknown mode ",
                                                   record.mode()));
  }
  if (record.has_value()) {
    if (!IsValidDType(record.dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", record.name(), "': unknown dtype ", record.dtype()));
    }
    record.set_value_size(record.data().size());
    TK_RETURN_IF_ERROR(CheckValueSize(
        static_cast<DType>(record.dtype()),
        absl::Span<const int64_t>(record.shape().data(), record.shape_size()), record.data().size()));
  } else if (!record.data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", record.name(), "': data given but has_value is false"));
  }
  const size_t bytes = record.data().size() + record.name().size() + 64;
  Item item{Item::kRecord, std::move(record)};
  return Enqueue(std::move(item), bytes);
}

absl::Status Writer::EndStep(uint64_t step) {
  Item item{Item::kEndStep};
  item.step = step;
  return Enqueue(std::move(item), 0);
}

absl::Status Writer::WaitFlushed(const std::shared_ptr<FlushWait>& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !error_.ok() || (wait->sent && acked_seq_ >= wait->seq); });
  if (wait->sent && acked_seq_ >= wait->seq) return absl::OkStatus();
  return error_;
}

absl::Status Writer::Flush() {
  Item item{Item::kFlush};
  item.flush = std::make_shared<FlushWait>();
  auto wait = item.flush;
  TK_RETURN_IF_ERROR(Enqueue(std::move(item), 0));
  return WaitFlushed(wait);
}

absl::Status Writer::Close(bool end_of_training) {
  Item item{Item::kClose};
  item.end_of_training = end_of_training;
  item.flush = std::make_shared<FlushWait>();
  auto wait = item.flush;
  TK_RETURN_IF_ERROR(Enqueue(std::move(item), 0));
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  absl::Status s = WaitFlushed(wait);
  if (sender_.joinable()) sender_.join();
  if (acker_.joinable()) acker_.join();
  return s;
}

bool Writer::Send(v1::PushRequest& request, size_t bytes) {
  const uint64_t seq = next_seq_++;
  request.set_seq(seq);
  if (bytes > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    unacked_.emplace_back(seq, bytes);
  }
  return stream_->Write(request);
}

void Writer::SendLoop() {
  v1::PushRequest request;
  // Items are taken from the queue all at once (one lock per wake-up, not per
  // record); `taken` and the queue swap buffers, so neither reallocates.
  std::vector<Item> taken;
  size_t next = 0;
  for (;;) {
    if (next == taken.size()) {
      taken.clear();
      next = 0;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || !error_.ok(); });
      if (!error_.ok()) return;
      taken.swap(queue_);
    }
    Item& item = taken[next++];
    request.Clear();
    size_t bytes = 0;
    bool done = false;
    switch (item.kind) {
      case Item::kRecord: {
        // Pack following records into the same message up to message_bytes.
        auto add = [&](Item& it) {
          bytes += it.record.data().size() + it.record.name().size() + 64;
          *request.mutable_records()->add_records() = std::move(it.record);
        };
        add(item);
        while (next < taken.size() && taken[next].kind == Item::kRecord &&
               bytes + taken[next].record.data().size() <= options_.message_bytes &&
               request.records().records(request.records().records_size() - 1).data().size() <=
                   options_.chunk_bytes) {
          add(taken[next++]);
        }
        break;
      }
      case Item::kEndStep:
        request.mutable_end_step()->set_step(item.step);
        break;
      case Item::kFlush:
        request.mutable_flush();
        break;
      case Item::kClose:
        request.mutable_close()->set_end_of_training(item.end_of_training);
        done = true;
        break;
    }
    bool ok = true;
    if (request.has_records()) {
      // A value larger than chunk_bytes goes out as its record with the first
      // chunk, then Chunk messages (it is always alone in its message).
      auto* records = request.mutable_records();
      v1::TensorRecord& last = *records->mutable_records(records->records_size() - 1);
      if (last.data().size() > options_.chunk_bytes) {
        std::string data = std::move(*last.mutable_data());
        last.set_data(data.substr(0, options_.chunk_bytes));
        ok = Send(request, options_.chunk_bytes);
        size_t offset = options_.chunk_bytes;
        while (ok && offset < data.size()) {
          const size_t n = std::min(options_.chunk_bytes, data.size() - offset);
          v1::PushRequest chunk;
          chunk.mutable_chunk()->set_data(data.substr(offset, n));
          offset += n;
          ok = Send(chunk, offset >= data.size() ? bytes - (offset - n) : n);
        }
      } else {
        ok = Send(request, bytes);
      }
    } else {
      // Record the seq before sending: the ack (and the end of the stream
      // after a Close) may arrive before Write() returns.
      if (item.flush != nullptr) {
        std::lock_guard<std::mutex> l(mu_);
        item.flush->sent = true;
        item.flush->seq = next_seq_;
      }
      ok = Send(request, 0);
      cv_.notify_all();
    }
    if (!ok) {
      // The stream broke; the ack thread reports why.
      return;
    }
    if (done) {
      stream_->WritesDone();
      return;
    }
  }
}

void Writer::AckLoop() {
  v1::PushResponse ack;
  while (stream_->Read(&ack)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      acked_seq_ = std::max(acked_seq_, ack.acked_seq());
      while (!unacked_.empty() && unacked_.front().first <= acked_seq_) {
        buffered_bytes_ -= std::min(buffered_bytes_, unacked_.front().second);
        unacked_.pop_front();
      }
      if (ack.stop_requested()) stop_reason_ = ack.stop_reason();
    }
    committed_through_.store(ack.committed_through());
    if (ack.stop_requested()) stop_requested_.store(true);
    cv_.notify_all();
  }
  grpc::Status status = stream_->Finish();
  absl::Status s = FromGrpc(status, &context_, connection_->address());
  if (s.ok()) s = absl::FailedPreconditionError("the Push stream is closed");
  Fail(s);
}

}  // namespace client
}  // namespace tensorkeep
