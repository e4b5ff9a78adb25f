// The hand-over protocol between a training process and tensorkeep-agent
// (its Python twin: client/python/tensorkeep/_handover.py; docs/architecture.md
// has the picture).
//
// One Unix SOCK_SEQPACKET connection per writer (message boundaries are
// kept; file descriptors travel with SCM_RIGHTS). Every message starts with
// a little-endian u32 type. Tensor bytes never go through the socket: the
// client copies them once into a shared memory region (a sealed memfd it
// sends with Open) and sends their position; the agent copies them out and
// advances `consumed` in the region's header, so the client can reuse that
// space. Only Open, Flush, Close and Sync get a reply, in order; the others
// are fire-and-forget, and a failure of the writer shows in the header's
// flags (the client then asks with Sync, whose reply carries the error).
//
// Client -> agent (after the u32 type):
//   kOpen      u32 version, u32 num_workers, u64 ring_bytes,
//              u64 max_queue_bytes, f64 retry_timeout_seconds (inf: never give
//              up), then 7 strings (u32 length + bytes): target, trial, worker,
//              tls_ca, tls_cert, tls_key, token; then, optionally, u32 attempt
//              (v1.Open.attempt; absent: 0), then, optionally (only after
//              attempt), f64 max_stall_seconds (how long a Write or EndStep
//              may wait for the agent's writer before it is journaled; absent:
//              kDefaultMaxStallSeconds; inf: never journal). One fd: the
//              region (a memfd sealed against shrinking, kRegionHeaderBytes +
//              ring_bytes long).
//   kWrite     u32 0, u64 pos, u64 len, then a TensorRecord without its data
//              (has_value set when it has one). The value is at region offset
//              kRegionHeaderBytes + pos % ring_bytes, `len` bytes, never
//              wrapping; pos only grows.
//   kWriteFd   u32 0, u64 0, u64 len, then the record: a value larger than
//              the ring, in its own sealed memfd (one fd) at offset 0.
//   kEndStep   u32 0, u64 step.
//   kFlush     u32 0, u64 request id          -> reply once durable on the
//              collector, journaled entries included
//   kClose     u32 end_of_training, u64 id    -> reply once closed; the end
//   kSync      u32 0, u64 request id          -> reply once every message
//              before it was taken (its bytes consumed: given to the
//              writer, or journaled and synced to disk); carries the
//              writer's error if it failed
//   kBatch     u32 count, then count x (u32 length + a kWrite or kEndStep
//              message): what one training step handed over, in one message
//              (one wake-up of the agent, one system call of the client);
//              handled as those messages one after another.
// Agent -> client:
//   kReply     u32 ok (1) or failed (0), u64 request id (0 for Open); when
//              failed: i32 absl status code, then 2 strings: reason
//              (ReasonName, "" for none) and message.
//
// A connection that ends without kClose (the training process exited or was
// killed) still has everything it handed over pushed; its writer is then
// closed without end-of-training (the worker is not finished).
#ifndef TENSORKEEP_AGENT_HANDOVER_H_
#define TENSORKEEP_AGENT_HANDOVER_H_

#include <cstddef>
#include <cstdint>

namespace tensorkeep {
namespace agent {

inline constexpr uint32_t kProtocolVersion = 2;

enum MessageType : uint32_t {
  kOpen = 1,
  kWrite = 2,
  kWriteFd = 3,
  kEndStep = 4,
  kFlush = 5,
  kClose = 6,
  kSync = 7,
  kBatch = 8,
  kReply = 100,
};

// The region's header page; the ring follows it.
inline constexpr size_t kRegionHeaderBytes = 4096;
// Header fields the agent writes (the client only reads them).
inline constexpr size_t kConsumedOffset = 8;           // u64: ring bytes taken through
inline constexpr size_t kFlagsOffset = 16;             // u32: kFlag*
inline constexpr size_t kCommittedThroughOffset = 24;  // i64
inline constexpr size_t kStreamsOpenedOffset = 32;     // u64: the writer's Push streams so far
inline constexpr size_t kJournaledBytesOffset = 40;    // u64: bytes journaled so far
inline constexpr size_t kDroppedRecordsOffset = 48;    // u64: records dropped (journal full)
// u64 the client sets while it waits for room in the ring (FUTEX_WAIT on
// the low half of `consumed`): the ring position it needs `consumed` to
// reach; 0 while it does not wait. The agent (with kFlagWakesRoomWaiters)
// wakes it once `consumed` gets there, or when the writer fails.
inline constexpr size_t kRoomWantedOffset = 56;
// u32 length + bytes: why the collector asks to stop (written before the flag).
inline constexpr size_t kStopReasonOffset = 64;
inline constexpr size_t kMaxStopReasonBytes = 2048;
inline constexpr uint32_t kFlagFailed = 1;
inline constexpr uint32_t kFlagStopRequested = 2;
inline constexpr uint32_t kFlagJournaling = 4;  // entries wait in the journal now
// This agent wakes a client waiting for room (kRoomWantedOffset); a client
// without it (an older agent) polls `consumed` instead.
inline constexpr uint32_t kFlagWakesRoomWaiters = 8;

// Bounds of what a client may ask.
inline constexpr size_t kMaxMessageBytes = 64 << 10;  // a record without its data, an Open
inline constexpr uint64_t kMinRingBytes = 64 << 10;
inline constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_HANDOVER_H_
