// PushReactor: one writer's Push stream.
//
// Acks: an ack covers a message only once its data is durable. A record sent
// in several messages (a record, then Chunk messages) is acknowledged only
// after its last chunk's write is durable, so a writer that reconnects resends
// it whole; after a failed write nothing from its message on is acknowledged.
//
// Reads a message, lets its WriteSession check and encode it, hands the
// batch to the committer and reads on — while the stream's writes waiting
// for the committer stay within a byte window (kStreamWindowBytes), and not
// while the committer's queue is over budget (unless the stream has nothing
// in flight), so a fast writer is slowed rather than buffered: memory stays
// bounded. Acks are cumulative
// (acked_seq: every message with seq <= it is durable) and coalesced while a
// write to the client is in progress. A bad message ends the stream with its
// error after the earlier messages are durable and acknowledged.
//
// Thread safety: reactions run on gRPC threads and commit callbacks on the
// committer thread; mu_ guards the state they share. gRPC calls are made
// outside mu_.
#ifndef TENSORKEEP_SERVER_PUSH_REACTOR_H_
#define TENSORKEEP_SERVER_PUSH_REACTOR_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "google/protobuf/arena.h"
#include "grpcpp/grpcpp.h"
#include "proto/tensorkeep.pb.h"
#include "server/access/access_control.h"
#include "server/collector.h"
#include "server/write_session.h"

namespace tensorkeep {

class PushReactor;

// The live Push streams of one service: their count, and a way to end them
// all when the collector shuts down (SIGTERM). A drained stream reads no
// more messages; once its in-flight writes are durable and acknowledged it
// ends with UNAVAILABLE, and its writer reconnects (to the restarted
// collector) and resends what was not acknowledged. So a shutdown takes as
// long as the writes already read, not the writers' patience.
//
// Thread safety: thread-safe.
class PushStreams {
 public:
  // Push reactors not yet done.
  int active() const { return active_.load(); }
  // Drains every live stream, and every stream registered after this.
  void DrainAll();

 private:
  friend class PushReactor;
  struct Guard;
  // Registers a new stream; false if draining has begun (the stream ends at once).
  bool Add(const std::shared_ptr<Guard>& guard);
  void Remove();

  std::atomic<int> active_{0};
  std::mutex mu_;
  bool draining_ = false;                     // guarded by mu_
  std::vector<std::weak_ptr<Guard>> guards_;  // guarded by mu_; pruned on Add
};

class PushReactor : public grpc::ServerBidiReactor<v1::PushRequest, v1::PushResponse> {
 public:
  // Committer queue size above which streams with a write in flight pause.
  static constexpr size_t kQueueBudget = 64u << 20;
  // A stream reads on while its writes waiting for the committer hold less
  // than this many bytes and number fewer than kMaxInflightMessages: many
  // small messages (a step's tensors, then EndStep, step after step) are in
  // flight at once instead of one round trip to the disk per message.
  static constexpr size_t kStreamWindowBytes = 8u << 20;
  static constexpr size_t kMaxInflightMessages = 256;

  // `streams` (not owned) registers the reactor until OnDone; `access` says
  // which trials the stream may Open.
  PushReactor(grpc::CallbackServerContext* context, Collector* collector, PushStreams* streams,
              CallAccess access);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

  // Tests only: `hook` runs on every stream after each message is handled,
  // before its write is submitted (outside the reactor's lock), with the
  // message's seq; an empty function removes it. Set it while no stream runs.
  static void SetHandledHookForTesting(std::function<void(uint64_t seq)> hook);

 private:
  // What to do after a state change, decided under mu_ and done outside it.
  // A read decided here is only started after mu_ is released: until Act has
  // started it (reads_starting_), the stream may not finish, or another thread
  // could finish it and have the reactor deleted under the StartRead (ASan saw
  // it: a commit deciding a read while the client's cancel failed the ack
  // write). A count, not a flag: the read one thread started can complete,
  // and another thread decide the next read, before the first thread is back
  // under mu_ to say its read is started (ASan saw that too, a flag cleared
  // by the first thread left the second one's StartRead unguarded). Act
  // touches nothing after its last gRPC call: once a write or Finish is
  // started, the reactor may be deleted (OnDone) on another thread at any
  // moment.
  struct Actions {
    bool read = false;
    bool write = false;
    bool finish = false;
    absl::Status status;  // for finish
  };
  Actions NextActionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Act(const Actions& actions);
  void OnCommitted(uint64_t seq, const absl::Status& status);
  // A commit of the trial: sends an ack at once if a stop was requested, so a
  // writer learns of it without having to send anything.
  void OnTrialChanged();
  // The collector shuts down: read no more, end once the writes read are
  // durable and acknowledged (PushStreams).
  void Drain();

  friend class PushStreams;
  using Guard = PushStreams::Guard;
  v1::PushResponse MakeAckLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The highest seq an ack may cover now: every message up to it is durable.
  uint64_t AckableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::CallbackServerContext* const context_;
  const CallAccess access_;
  Collector* const collector_;
  PushStreams* const streams_;
  WriteSession session_;  // used by OnReadDone only (one read at a time)
  std::shared_ptr<Guard> guard_;
  std::shared_ptr<TrialSubscription> subscription_;  // set once, after Open
  // Each message is parsed on an arena that is reset once the message was
  // handled: a small record then costs no allocation or destructor call of
  // its own (they were a fifth of the collector's CPU with scalars). The
  // first block is kept across resets.
  std::unique_ptr<char[]> arena_block_;
  google::protobuf::Arena arena_;
  v1::PushRequest* request_;

  absl::Mutex mu_;
  v1::PushResponse response_ ABSL_GUARDED_BY(mu_);
  // The writes waiting for the committer: the first seq each carries data
  // of, and its bytes.
  struct Inflight {
    uint64_t first_seq;
    size_t bytes;
  };
  std::deque<Inflight> inflight_ ABSL_GUARDED_BY(mu_);
  size_t inflight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Seq of the message that started a record still waiting for chunks (0: none).
  uint64_t partial_from_ ABSL_GUARDED_BY(mu_) = 0;
  // Acks never go beyond this: the message after it failed to be stored.
  uint64_t ack_limit_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // the writer sent Close
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t acked_sent_ ABSL_GUARDED_BY(mu_) = 0;
  bool ack_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_ ABSL_GUARDED_BY(mu_) = true;
  // OnReadDone is handling a message outside mu_ and may submit a write that
  // calls back into this reactor: it must not finish (and be deleted) before.
  bool handling_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Reads decided under mu_ that their Act has not started yet (0 or 1, and
  // briefly 2: see Actions).
  int reads_starting_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_sent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// Shared with the trial subscription and PushStreams; OnDone takes `mu`
// before deleting the reactor, so their callbacks never see a deleted reactor.
struct PushStreams::Guard {
  std::mutex mu;
  PushReactor* reactor = nullptr;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_PUSH_REACTOR_H_
