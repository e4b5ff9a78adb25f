// Journal: what one writer's session could not hand to its client::Writer in
// time (the collector unreachable or slow), spilled to a local file so the
// training step is not blocked, and replayed in order once the writer takes
// data again (docs/architecture.md, "The agent's journal").
//
// One file per spill, DIR/<trial>.<worker>.<pid>-<session>-<n>.tkj (names
// sanitised), 0600 in a 0700 directory. It starts with an 8-byte magic, then
// frames:
//   u32 payload length, u32 masked CRC-32C of the payload, payload
// and a payload is one u8 kind and its body: kHeader (first, once: the
// writer's target, trial, worker as u32-length strings, then u32 num_workers
// and u32 attempt), kRecord (a v1::TensorRecord with its data), kEndStep (u64 step) or
// kClose (u8 end_of_training). Sync() fsyncs; the session calls it at the end
// of every step it journals and before it answers a Flush, Close or Sync. A
// frame that is cut short or whose checksum does not match (the agent or the
// machine died while writing it) ends the journal: it and what follows are
// discarded (truncated, logged), never misread.
//
// Credentials (TLS files, token) are not written: a journal replayed by a
// later agent uses that agent's environment (TENSORKEEP_TOKEN, ...).
//
// Thread safety: a Journal is used by one thread; JournalSpace is thread-safe.
#ifndef TENSORKEEP_AGENT_JOURNAL_H_
#define TENSORKEEP_AGENT_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace agent {

// The disk the journals of one agent may use in all.
class JournalSpace {
 public:
  explicit JournalSpace(uint64_t limit) : limit_(limit) {}
  // Takes n bytes; false (nothing taken) past the limit.
  bool Take(uint64_t n);
  void Give(uint64_t n) { used_.fetch_sub(n); }
  // Counts n bytes that exist already, whatever the limit.
  void Add(uint64_t n) { used_.fetch_add(n); }
  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_.load(); }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

class Journal {
 public:
  static constexpr char kSuffix[] = ".tkj";
  struct Header {
    std::string target;
    std::string trial;
    std::string worker;
    uint32_t num_workers = 1;
    uint32_t attempt = 0;  // v1.Open.attempt
  };
  struct Entry {
    enum Kind : uint8_t { kHeader = 0, kRecord = 1, kEndStep = 2, kClose = 3 } kind = kRecord;
    v1::TensorRecord record;  // kRecord
    uint64_t step = 0;        // kEndStep
    bool end_of_training = false;  // kClose
  };

  // Creates a new journal file in `dir` (made 0700 if missing) and writes its
  // header (synced). Its bytes count in `space` until Remove().
  static absl::StatusOr<std::unique_ptr<Journal>> Create(const std::string& dir,
                                                         const std::string& name,
                                                         const Header& header, JournalSpace* space);
  // Opens a journal left by an agent that ended before replaying it: reads
  // its header, and cuts a torn tail off (logged). Reads start after the
  // header.
  static absl::StatusOr<std::unique_ptr<Journal>> OpenExisting(const std::string& path,
                                                               JournalSpace* space,
                                                               Header* header);
  ~Journal();  // closes the file (it stays on disk unless Remove()d)
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends one entry (not synced). ResourceExhausted when it would take the
  // agent's journals past their space; an I/O error as Internal.
  absl::Status Append(const Entry& entry);
  absl::Status Sync();
  bool dirty() const { return dirty_; }

  // The entry at the read position, in the order appended; false at the end.
  absl::StatusOr<bool> Read(Entry* entry);
  bool AllRead() const { return read_pos_ == size_; }
  // Reads start again after the header.
  void Rewind() { read_pos_ = data_start_; }

  // Deletes the file and gives its space back.
  void Remove();
  const std::string& path() const { return path_; }
  // Bytes of the file (header included).
  uint64_t size() const { return size_; }
  uint64_t entries() const { return entries_; }

 private:
  Journal(int fd, std::string path, JournalSpace* space);
  absl::Status AppendPayload(const std::string& payload);
  // The payload of the frame at `pos` and the position after it; false for
  // the end or a torn frame.
  bool ReadFrame(uint64_t pos, uint64_t end, std::string* payload, uint64_t* next) const;

  int fd_;
  std::string path_;
  JournalSpace* space_;
  uint64_t size_ = 0;        // bytes written (and taken from space_)
  uint64_t data_start_ = 0;  // after the header frame
  uint64_t read_pos_ = 0;
  uint64_t entries_ = 0;  // appended (or found) after the header
  bool dirty_ = false;
  bool removed_ = false;
};

}  // namespace agent
}  // namespace tensorkeep

#endif  // TENSORKEEP_AGENT_JOURNAL_H_
