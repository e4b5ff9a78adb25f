// Writer: pushes one worker's tensors to a collector.
//
// Write() validates a record and queues it; a sender thread packs queued
// records into messages of about `message_bytes` (splitting values larger
// than a chunk) and streams them; an ack thread reads the collector's acks.
// Memory is bounded: a record's bytes count from Write() until the collector
// acknowledges them as durable, and Write() blocks while the total would
// exceed `max_buffered_bytes` (backpressure, not buffering). Flush() returns
// once everything written before it is durable.
//
// Thread safety: all methods are thread-safe; records are sent in the order
// their Write() calls returned.
#ifndef TENSORKEEP_CLIENT_WRITER_H_
#define TENSORKEEP_CLIENT_WRITER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace client {

struct WriterOptions {
  std::string server;  // HOST:PORT; empty: $TENSORKEEP_SERVER or the default
  std::string trial;
  std::string worker = "worker_0";
  uint32_t num_workers = 1;
  // Bytes of tensor data written but not yet acknowledged before Write() blocks.
  size_t max_buffered_bytes = 64u << 20;
  // Target size of one message on the wire.
  size_t message_bytes = 1u << 20;
  // Values larger than this are sent as a record plus Chunk messages.
  size_t chunk_bytes = 4u << 20;
};

class Writer {
 public:
  // Connects and opens the Push stream. Fails when the collector cannot be
  // reached within `connect_timeout_seconds`.
  static absl::StatusOr<std::unique_ptr<Writer>> Open(const WriterOptions& options,
                                                      double connect_timeout_seconds = 10);
  // Closes without end-of-training if Close() was not called.
  ~Writer();

  // Queues one record (`record.data` is moved from). InvalidArgument for a
  // record that cannot be valid (names, dtype, size, mode), before sending.
  // Blocks while the buffer is full. Returns the stream's error if it failed.
  absl::Status Write(v1::TensorRecord record);
  // This worker is done with every global step <= step.
  absl::Status EndStep(uint64_t step);
  // Returns once everything written before is durable on the collector.
  absl::Status Flush();
  // Flushes and closes the stream; end_of_training says this worker will not
  // write to the trial again.
  absl::Status Close(bool end_of_training);

  // A rule with action "stop" fired for this trial (seen in acks).
  bool StopRequested() const { return stop_requested_.load(); }
  std::string StopReason() const;
  // This worker's highest durable committed step (-1 if none).
  int64_t CommittedThrough() const { return committed_through_.load(); }

 private:
  struct FlushWait {
    bool sent = false;
    uint64_t seq = 0;
  };
  struct Item {
    enum Kind { kRecord, kEndStep, kFlush, kClose } kind;
    v1::TensorRecord record;
    uint64_t step = 0;
    bool end_of_training = false;
    std::shared_ptr<FlushWait> flush;
  };

  explicit Writer(const WriterOptions& options);
  absl::Status Enqueue(Item item, size_t bytes);
  absl::Status WaitFlushed(const std::shared_ptr<FlushWait>& wait);
  void SendLoop();
  void AckLoop();
  // Sends `request` with the next seq; bytes are released when it is acked.
  bool Send(v1::PushRequest& request, size_t bytes);
  void Fail(const absl::Status& status);

  const WriterOptions options_;
  std::shared_ptr<Connection> connection_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::PushRequest, v1::PushResponse>> stream_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Item> queue_;
  size_t buffered_bytes_ = 0;                      // queued or unacknowledged
  std::deque<std::pair<uint64_t, size_t>> unacked_;  // (seq, bytes) sent
  uint64_t next_seq_ = 1;                          // sender thread only
  uint64_t acked_seq_ = 0;
  bool closed_ = false;
  absl::Status error_;
  std::string stop_reason_;

  std::atomic<bool> stop_requested_{false};
  std::atomic<int64_t> committed_through_{-1};
  std::thread sender_;
  std::thread acker_;
};

}  // namespace client
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_WRITER_H_
