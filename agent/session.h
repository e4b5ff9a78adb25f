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
// Thread safety: Run() is called once, on the session's own thread.
#ifndef TENSORKEEP_AGENT_SESSION_H_
#define TENSORKEEP_AGENT_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/agent_budget.h"
#include "agent/shared_region.h"
#include "client/writer.h"

namespace tensorkeep {
namespace agent {

class Session {
 public:
  // Takes ownership of the connected socket `fd`.
  // `linger_seconds`: the writer's WriterOptions::linger_seconds.
  Session(int fd, uint64_t id, AgentBudget* budget, double linger_seconds);
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
  // Opens the writer if not done yet (at the first message that needs it).
  void EnsureWriter();
  // The writer failed for good with `status` (kept; every later reply carries it).
  void SetError(const absl::Status& status);
  void Reply(uint64_t request_id, const absl::Status& status);
  void PublishState();
  void Finish();
  std::string Name() const;

  const int fd_;
  const uint64_t id_;
  AgentBudget* const budget_;
  const double linger_seconds_;
  AgentBudget::Reservation reservation_;

  client::WriterOptions options_;
  double connect_timeout_seconds_ = 0;
  bool opened_ = false;        // Open was accepted
  bool writer_tried_ = false;  // Writer::Open was attempted
  bool closed_ = false;        // Close was handled
  std::unique_ptr<client::Writer> writer_;
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
