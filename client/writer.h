// Writer: pushes one worker's tensors to a collector.
//
// Write() validates a record and queues it; a stream thread packs queued
// records into messages of about `message_bytes` (splitting values larger
// than a chunk; whole queued steps share a message) and streams them, and an
// ack thread per stream reads the collector's acks. Every message is kept
// until the collector acknowledges it, which it does only once the data is
// durable.
//
// Reconnecting: when the stream breaks for want of a collector (it stopped,
// crashed, restarted, or the connection dropped), the stream thread opens a
// new stream after a backoff (ReconnectBackoff: exponential with jitter) and
// resends every unacknowledged message in order (a chunked value whole, from
// its record), so nothing is lost and, the collector skipping identical
// resends, nothing is duplicated. It gives up once it has failed to reach the
// collector for `retry_timeout_seconds`: Write/Flush/Close then fail with an
// error naming the steps and tensors that were not saved. Errors that are the
// writer's own doing (a conflict, a bad record, a limit) fail at once.
//
// Memory is bounded, connected or not: a record's bytes count from Write()
// until the collector acknowledges them as durable, and Write() blocks while
// the total would exceed `max_buffered_bytes` (backpressure, not buffering).
// Flush() returns once everything written before it is durable.
//
// Thread safety: all methods are thread-safe; records are sent in the order
// their Write() calls returned.
#ifndef TENSORKEEP_CLIENT_WRITER_H_
#define TENSORKEEP_CLIENT_WRITER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "client/reconnect_backoff.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace client {

struct WriterOptions {
  // HOST:PORT, or a cluster's HOST:PORT,HOST:PORT,... (the trial goes to the
  // collector that holds it, else its owner: client/cluster.h); empty:
  // $TENSORKEEP_SERVERS, else $TENSORKEEP_SERVER, else the default.
  std::string server;
  ClientSecurity security;  // TLS and token; empty fields from the environment
  std::string trial;
  std::string worker = "worker_0";
  uint32_t num_workers = 1;
  // Bytes of tensor data written but not yet acknowledged before Write() blocks.
  size_t max_buffered_bytes = 64u << 20;
  // Target size of one message on the wire.
  size_t message_bytes = 1u << 20;
  // Values larger than this are sent as a record plus Chunk messages.
  size_t chunk_bytes = 4u << 20;
  // Whole queued steps share a message (a writer that fell behind sends many
  // small steps as one records message and one EndStep). false sends each
  // EndStep as its own message, as the writer did before (for benchmarks).
  bool coalesce_steps = true;
  // Writes an unpublished copy (Open.unpublished: `tensorkeep rebalance`),
  // hidden from readers until published.
  bool unpublished = false;
  // The attempt of the job this writer belongs to (Open.attempt): 0 for a
  // first run, one more at each restart of the job (torchrun's
  // TORCHELASTIC_RESTART_COUNT). A higher attempt rewrites the steps its
  // worker's earlier attempt committed; docs/semantics.md, "Restarted jobs".
  uint32_t attempt = 0;
  // Records not followed by an EndStep, Flush or Close, nor by a message's
  // worth of bytes, wait this long after the first of them before they are
  // sent, so that a step's tensors go as one message (0: at once).
  double linger_seconds = 0;
  // Ask the collector for an ack (a Flush) after this many bytes sent without
  // one, at most half of max_buffered_bytes, so that acks and the memory they
  // release keep flowing whatever the collector's ack policy (0: never).
  size_t auto_flush_bytes = 16u << 20;
  // Reconnecting (defaults: proto/limits.proto, ReconnectPolicy). The writer
  // gives up after failing to reach the collector for this long (0: at the
  // first failure; infinity: never).
  double retry_timeout_seconds = kReconnectGiveUpSeconds;
  double backoff_first_seconds = kReconnectBackoffFirstSeconds;
  double backoff_max_seconds = kReconnectBackoffMaxSeconds;
};

// What a writer held that the collector had not acknowledged, in the order
// written (Writer::Abandon): a record (its value whole), an end of step, or
// the close.
struct UnsavedItem {
  enum Kind { kRecord, kEndStep, kClose } kind = kRecord;
  v1::TensorRecord record;  // kRecord
  uint64_t step = 0;        // kEndStep
  bool end_of_training = false;  // kClose
};

class Writer {
 public:
  // Connects and opens the Push stream. Fails when the collector cannot be
  // reached within `connect_timeout_seconds`.
  static absl::StatusOr<std::unique_ptr<Writer>> Open(const WriterOptions& options,
                                                      double connect_timeout_seconds = 10);
  // As Open, but does not wait for the collector: the stream thread connects
  // in the background, reconnecting as after a dropped stream (the
  // retry_timeout_seconds count from now), and Write() queues meanwhile.
  // Fails only for bad options (or a cluster whose owner cannot be told).
  static absl::StatusOr<std::unique_ptr<Writer>> OpenInBackground(const WriterOptions& options);
  // Closes without end-of-training if Close() was not called, waiting at most
  // kExitCloseSeconds for what was queued to be acknowledged (a warning
  // names what was not saved).
  ~Writer();

  // Queues one record (`record.data` is moved from). InvalidArgument for a
  // record that cannot be valid (names, dtype, size, mode), before sending.
  // Blocks while the buffer is full. Returns the stream's error if it failed.
  absl::Status Write(v1::TensorRecord record);
  // Checks a record as Write() does (and sets its value_size) without
  // queueing it: a record that passes is one Write() takes.
  static absl::Status Validate(v1::TensorRecord* record);
  // Write() and EndStep() that wait for room in the buffer only until
  // `deadline`: DeadlineExceeded then, with *record left as it was (for a
  // caller that keeps it elsewhere, e.g. tensorkeep-agent's journal). The
  // record must have passed Validate().
  absl::Status TryWrite(v1::TensorRecord* record, std::chrono::steady_clock::time_point deadline);
  absl::Status TryEndStep(uint64_t step, std::chrono::steady_clock::time_point deadline);
  // A Flush that does not wait: Flushed(ticket) tells when everything
  // written before it is durable on the collector. Fails as Write() does.
  absl::StatusOr<uint64_t> RequestFlush();
  bool Flushed(uint64_t ticket) const;
  // Waits until Flushed(ticket), the writer's error, or `deadline`
  // (DeadlineExceeded).
  absl::Status WaitFlushed(uint64_t ticket, std::chrono::steady_clock::time_point deadline);
  // The writer's error once it failed for good (OK until then).
  absl::Status status() const;
  // This worker is done with every global step <= step.
  absl::Status EndStep(uint64_t step);
  // Returns once everything written before is durable on the collector.
  absl::Status Flush();
  // Flushes and closes the stream; end_of_training says this worker will not
  // write to the trial again.
  absl::Status Close(bool end_of_training);
  // Close that waits for the collector's acknowledgement only until
  // `deadline` (DeadlineExceeded, the close still queued); called again, it
  // waits again for the close queued the first time.
  absl::Status CloseUntil(bool end_of_training, std::chrono::steady_clock::time_point deadline);
  // Stops the writer without closing its stream and returns everything the
  // collector had not acknowledged, in order (for a caller that keeps it
  // elsewhere, e.g. tensorkeep-agent's journal when it stops during an
  // outage). Every later call fails; the destructor waits for nothing.
  std::vector<UnsavedItem> Abandon();
  // "N tensors at steps ... ('a', ...), and the end of step S" of what the
  // collector has not acknowledged; empty when everything is durable.
  std::string Unsaved() const;

  // A rule with action "stop" fired for this trial (seen in acks).
  bool StopRequested() const { return stop_requested_.load(); }
  std::string StopReason() const;
  // This worker's highest durable committed step (-1 if none).
  int64_t CommittedThrough() const { return committed_through_.load(); }
  // Streams after the first that reached a collector (got an ack).
  int Reconnects() const { return reconnects_.load(); }
  // Push streams opened so far (the first, then one a reconnection attempt).
  uint64_t StreamsOpened() const { return streams_opened_.load(); }

 private:
  struct Item {
    enum Kind { kRecord, kEndStep, kFlush, kClose } kind;
    v1::TensorRecord record;
    uint64_t step = 0;
    bool end_of_training = false;
    uint64_t ticket = 0;  // kFlush
    size_t bytes = 0;     // counted in buffered_bytes_
    int end_steps = 1;    // kEndStep: how many EndStep items it stands for
  };
  // One message built from the queue, kept until acknowledged.
  struct Message {
    Item::Kind kind;
    v1::PushRequest request;     // seq set when sent
    size_t bytes = 0;            // released when acknowledged
    uint64_t id = 0;             // position in the writer's message sequence
    uint64_t gen = 0;            // the stream it was last sent on (0: not yet)
    uint64_t seq = 0;            // its seq on that stream
    bool chunks_follow = false;  // Chunk messages carry the rest of its last value
    bool is_chunk = false;
    uint64_t ticket = 0;  // kFlush
  };

  explicit Writer(const WriterOptions& options);
  absl::Status Enqueue(Item item);
  // Enqueue waiting for room until `deadline` (DeadlineExceeded, `item`
  // untouched) and never for a flush ticket: its ticket in *ticket.
  absl::Status EnqueueUntil(Item* item, std::chrono::steady_clock::time_point deadline,
                            uint64_t* ticket);
  absl::Status WaitFor(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                       std::chrono::steady_clock::time_point deadline);
  // Validates the options and finds the collector (Open, OpenInBackground).
  static absl::StatusOr<std::unique_ptr<Writer>> Create(const WriterOptions& options);
  // The stream thread: opens streams, sends, reconnects.
  void Run();
  // Sends Open, the unacknowledged messages and new ones on stream `gen`
  // until it breaks, Close is sent, or the writer is abandoned.
  void Stream(uint64_t gen, grpc::ClientReaderWriter<v1::PushRequest, v1::PushResponse>* stream);
  // The message with id `id`, packing it from the queue if needed; null once
  // stream `gen` ended or the writer is abandoned.
  std::shared_ptr<Message> NextMessage(uint64_t gen, uint64_t id);
  // Pops the next message's worth of queued items (requires mu_).
  std::vector<Item> TakeBatchLocked();
  std::vector<std::shared_ptr<Message>> Build(std::vector<Item> items);
  // Pops the queue's first item, keeping the counts below (requires mu_).
  Item PopLocked();
  void ReadAcks(uint64_t gen, grpc::ClientReaderWriter<v1::PushRequest, v1::PushResponse>* stream,
                grpc::ClientContext* context);
  // Fails the writer for good with `status` plus what was not saved.
  void Fail(const absl::Status& status);
  // "N tensors at steps ... ('a', 'b', ...)" of everything not acknowledged
  // (requires mu_); empty when nothing is unsaved.
  std::string UnsavedLocked() const;

  const WriterOptions options_;
  std::shared_ptr<Connection> connection_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // signalled on every state change
  std::deque<Item> queue_;
  size_t queued_record_bytes_ = 0;                      // of the records in queue_
  size_t queued_controls_ = 0;                          // items in queue_ that are not records
  std::chrono::steady_clock::time_point queued_since_;  // queue_ last became non-empty
  bool send_all_ = false;                               // a Write waits for room: no lingering
  size_t unflushed_bytes_ = 0;  // stream thread only: bytes built since the last Flush
  size_t buffered_bytes_ = 0;   // queued or unacknowledged
  std::deque<std::shared_ptr<Message>> pending_;  // built, not acknowledged
  uint64_t next_id_ = 1;
  uint64_t gen_ = 0;                        // the current stream
  bool stream_ended_ = false;               // the current stream's reads ended
  absl::Status stream_status_;              // ... with this status
  bool stream_acked_ = false;               // the current stream received an ack
  grpc::ClientContext* context_ = nullptr;  // the current stream's
  uint64_t flush_tickets_ = 0;
  uint64_t flushed_ticket_ = 0;
  bool close_queued_ = false;
  bool close_acked_ = false;
  bool abandoned_ = false;  // the destructor stops the stream thread
  absl::Status error_;
  std::string stop_reason_;

  std::atomic<bool> stop_requested_{false};
  std::atomic<int64_t> committed_through_{-1};
  std::atomic<int> reconnects_{0};
  std::atomic<uint64_t> streams_opened_{0};
  std::thread runner_;
};

}  // namespace client
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_WRITER_H_
