// WriteSession: the protocol state of one Push stream.
//
// It checks each PushRequest (Open first, increasing seq, valid names,
// dtypes, shapes, sizes and modes, one mode per step within a message, chunk
// continuity, no rewriting of steps this worker already committed unless
// byte-for-byte identical, which makes a writer's resend after a reconnect
// harmless), encodes the records of a
// good message into one batch (record blocks and large values together, so
// a crash leaves all or nothing; layout in server/stored_record.h), and returns it as a
// PendingWrite. A bad message yields an error and nothing from it is written. What other streams
// share (a step's mode, the trial's workers) is checked by the Committer, which owns it. One
// (trial, worker) has at most one live session: a second Open is refused until the first session
// is destroyed, with CONFLICT for a first Open (another process writes as this worker) and
// UNAVAILABLE for a resuming one (a writer reconnecting before the server saw its old stream end
// retries).
//
// Thread safety: none; one stream uses it from one thread at a time.
#ifndef TENSORKEEP_SERVER_WRITE_SESSION_H_
#define TENSORKEEP_SERVER_WRITE_SESSION_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tensorkeep.pb.h"
#include "server/collector.h"

namespace tensorkeep {

class WriteSession {
 public:
  // `collector` is not owned and must outlive the session.
  explicit WriteSession(Collector* collector);
  // Releases the (trial, worker) for another session (ReleaseWriter).
  ~WriteSession();
  // Releases the (trial, worker) for another session now: the stream takes
  // no more messages. Thread-safe against a concurrent Handle (it reads only
  // what Open set, before the caller decided to finish).
  void ReleaseWriter();
  WriteSession(const WriteSession&) = delete;
  WriteSession& operator=(const WriteSession&) = delete;

  struct Outcome {
    std::optional<PendingWrite> write;  // to submit; none for Flush or a partial chunk
    // The seq of the first message whose data `write` carries: a record
    // completed by Chunk messages started several messages earlier. No ack
    // may cover it before `write` is durable.
    uint64_t first_seq = 0;
    bool wants_ack = false;  // Flush/Close: ack once all before is durable
    bool closes = false;     // Close: the stream is done
  };
  // Consumes `request` (its data may be moved out).
  absl::StatusOr<Outcome> Handle(v1::PushRequest& request);

  // The trial (null before Open).
  const std::shared_ptr<Trial>& trial() const { return trial_; }
  const std::string& worker() const { return worker_; }
  // This worker's highest committed step as the session knows it.
  int64_t committed() const { return committed_; }
  // The seq of the message that started a record still waiting for Chunk
  // messages (0: none): no ack may cover it yet.
  uint64_t partial_from() const { return partial_from_; }

 private:
  absl::StatusOr<Outcome> HandleKind(v1::PushRequest& request);
  absl::StatusOr<Outcome> HandleOpen(const v1::Open& open);
  absl::StatusOr<Outcome> HandleRecords(v1::RecordBatch& batch);
  absl::Status ValidateRecord(const v1::TensorRecord& record, bool complete) const;
  // The batch and index update of a checked message: the records in `order`
  // (sorted by step and name) but those to `skip`, in record blocks and large
  // values (server/stored_record.h). Moves names and collections out.
  PendingWrite Encode(google::protobuf::RepeatedPtrField<v1::TensorRecord>& records,
                      const std::vector<int>& order, const std::vector<bool>& skip) const;
  // OK and *skip when the record repeats what is stored for a committed step;
  // `committed`: the worker's committed step once this message is applied.
  absl::Status CheckCommitted(v1::TensorRecord& record, int64_t committed, bool* skip) const;
  PendingWrite NewWrite() const;

  Collector* const collector_;
  const std::shared_ptr<WriteStream> stream_;
  uint64_t claim_ = 0;  // the (trial, worker) claim in the collector; 0: none
  std::shared_ptr<Trial> trial_;
  std::string worker_;
  uint32_t num_workers_ = 1;
  uint32_t attempt_ = 0;  // Open.attempt (server/worker_attempts.h)
  uint64_t last_seq_ = 0;
  int64_t current_step_ = -1;  // highest step written by this session
  int64_t committed_ = -1;
  bool closed_ = false;
  // A record batch whose last record still waits for Chunk messages.
  std::optional<v1::RecordBatch> partial_;
  uint64_t partial_from_ = 0;
  MemoryBudget::Reservation partial_memory_;  // room for the whole partial value
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_WRITE_SESSION_H_
