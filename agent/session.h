// Session: one training process's writer, handed over to the agent.
//
// Reads the client's messages (agent/handover.h) from its Unix socket in
// order, copies each tensor out of the client's shared memory into a record
// for its client::Writer (which batches, pushes, reconnects and resends),
// and marks the bytes consumed. Flush, Close and Sync are answered once done.
// The header of the shared memory tells the client the writer's state
// (failed, stop requested, committed step) without a round trip.
//
// A client that breaks the protocol (a bad message, a position outside its
// ring, an unsealed memfd) is disconnected with an error logged; what it
// handed over before is still pushed. A connection that ends without Close
// has its writer closed without end-of-training.
//
// Bounded stall: a record or end of step the writer cannot take within the
// client's max_stall_seconds (its buffer full: the collector unreachable or
// slower than training) is spilled to a Journal (agent/journal.h), and so is
// everything after it, so that the client's ring keeps being consumed and the
// training step is not blocked longer. The journal is handed to the writer in
// order, before newer data, whenever the writer has room, and deleted once
// all of it is durable on the collector. What the journal cannot take (its
// space used up, a disk error) is dropped with a warning, counted in the
// client's header. Flush and Close still mean durable on the collector: they
// hand the whole journal over and wait, for the client's retry_timeout at
// most; past it they answer UNAVAILABLE naming what is not yet durable, and
// the session goes on (it is not failed: later records are journaled).
//
// The collector away: the writer is opened in the background (a collector
// down when training starts stalls the first step for max_stall_seconds, as
// an outage later does), and with a journal it never gives up reconnecting:
// what it cannot push waits in the journal (bounded by --journal-max-mb), so
// saving does not stop after retry_timeout. A session whose training process
// closed (or went away) before everything was durable is an orphan: it keeps
// pushing while the agent runs. When the agent stops (a signal, or
// idle_exit_seconds with no training process connected), an orphan journals
// what its writer still held in memory (Writer::Abandon) and ends; its
// journals are pushed by the next agent that starts (agent/journal_replay.h),
// as are those of a writer the collector refused.
//
// The class's code is in three files: session.cc (the connection and its
// messages), session_writer.cc (the writer's life, orphans) and
// session_journal.cc (spilling, draining and keeping the journal).
//
// Thread safety: Run() is called once, on the session's own thread.
#ifndef TENSORKEEP_AGENT_SESSION_H_
#define TENSORKEEP_AGENT_SESSION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/agent_budget.h"
#include "agent/journal.h"
#include "agent/shared_region.h"
#include "client/writer.h"

namespace tensorkeep {
namespace agent {

// Where the sessions of one agent journal, and the disk they may use.
struct JournalSettings {
  std::string dir;
  JournalSpace* space = nullptr;
};

// A client that does not say (an older one): how long a training step may
// wait for the writer before what it hands over is journaled.
inline constexpr double kDefaultMaxStallSeconds = 5;

class Session {
 public:
  // Takes ownership of the connected socket `fd`.
  // `linger_seconds`: the writer's WriterOptions::linger_seconds.
  // `stopping`: set when the agent stops (orphans then journal and end);
  // `orphans`: counts the sessions whose training process is gone.
  Session(int fd, uint64_t id, AgentBudget* budget, double linger_seconds,
          const JournalSettings* journal, const std::atomic<bool>* stopping = nullptr,
          std::atomic<size_t>* orphans = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Serves the connection until it ends; returns once the writer is closed.
  void Run();

 private:
  struct Message {
    std::vector<char> bytes;
    std::vector<int> fds;  // owned; closed unless taken
  };
  // Receives the next message; false at the end of the connection (or on a
  // receive error, logged).
  bool Receive(Message* message);
  // Applies one message; an error is a protocol violation (disconnect).
  absl::Status Handle(Message* message);
  absl::Status HandleOpen(Message* message);
  absl::Status HandleWrite(Message* message, bool own_fd);
  absl::Status HandleBatch(Message* message);
  // Starts opening the writer, in the background, if not done yet (at the
  // first message that needs it).
  void EnsureWriter();
  // Waits until `deadline` for the writer being opened; true once writer_ is
  // set (false too when opening failed: error_ says why).
  bool WriterReady(std::chrono::steady_clock::time_point deadline);
  // Waits until `deadline` for everything handed over (the journal too) to be
  // durable, then (close) for the writer's close to be acknowledged.
  // DeadlineExceeded when it was not; the session's error otherwise.
  absl::Status WaitDurable(std::chrono::steady_clock::time_point deadline,
                           const bool* end_of_training);
  // The training process is gone (it closed, or disconnected) with data not
  // yet durable: pushes on until done, or until the agent stops, then
  // journals what the writer holds (Writer::Abandon).
  void Orphan(bool end_of_training);
  // The agent stops while this orphan is not durable: journals what its
  // writer still holds (in memory) to a journal replayed before its own.
  void JournalHeld();
  // The name of this session's next journal file.
  std::string NextJournalName();
  // What every journal of this session starts with: whom its entries are for.
  Journal::Header JournalHeader() const;
  // The answer to a Flush or Close that ran out of the client's retry_timeout.
  absl::Status NotYetDurable(absl::string_view what) const;
  // The writer gives up on the collector (Writer::Open's retry_timeout)
  // only without a journal to keep what it cannot push.
  bool Journaling() const;
  // The writer failed for good with `status` (kept; every later reply carries it).
  void SetError(const absl::Status& status);
  void Reply(uint64_t request_id, const absl::Status& status);
  void PublishState();
  void Finish();
  // A record or end of step from the client: to the writer if it takes it
  // within max_stall_seconds (and nothing waits in the journal), else to
  // the journal, else dropped.
  void Put(Journal::Entry entry);
  void Spill(Journal::Entry entry);
  void Drop(const Journal::Entry& entry, const absl::Status& why);
  // Hands journaled entries to the writer in order: while it has room
  // (blocking false, for a slice of time), or all of them, waiting for room
  // and then for them to be durable until `deadline` (blocking true, before a
  // Flush or Close). The journal is deleted once what it held is durable.
  void Drain(bool blocking,
             std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // The writer failed while entries were journaled: keep the file for the
  // next agent, and say so in the error.
  absl::Status KeepJournal(const absl::Status& status);
  std::string Name() const;

  const int fd_;
  const uint64_t id_;
  AgentBudget* const budget_;
  const double linger_seconds_;
  const JournalSettings* const journal_settings_;
  const std::atomic<bool>* const stopping_;
  std::atomic<size_t>* const orphans_;
  AgentBudget::Reservation reservation_;
  double max_stall_seconds_ = kDefaultMaxStallSeconds;
  std::unique_ptr<Journal> journal_;           // entries not yet durable, in order
  std::optional<Journal::Entry> drain_entry_;  // read from journal_, not taken by the writer yet
  uint64_t drain_ticket_ = 0;                  // a Flush after all of journal_ was taken
  int journals_ = 0;                           // created so far
  std::string journal_name_;                   // journal_'s name (no directory, no suffix)
  uint64_t journaled_bytes_ = 0;               // appended to journals so far
  uint64_t dropped_records_ = 0;
  uint64_t published_journaled_ = 0, published_dropped_ = 0;
  std::chrono::steady_clock::time_point last_drop_log_{};

  client::WriterOptions options_;
  double client_retry_timeout_ = 0;  // bounds a Flush or Close
  bool opened_ = false;        // Open was accepted
  bool writer_tried_ = false;  // Writer::Open was attempted
  bool closed_ = false;        // Close was handled
  std::unique_ptr<client::Writer> writer_;
  std::future<absl::StatusOr<std::unique_ptr<client::Writer>>> opening_;
  std::unique_ptr<SharedRegion> region_;
  uint64_t ring_bytes_ = 0;
  uint64_t consumed_ = 0;
  absl::Status error_;
  uint32_t flags_ = 0;
  int64_t committed_through_ = -1;
  uint64_t streams_opened_ = 0;
};

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_SESSION_H_
