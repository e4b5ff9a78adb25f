// Session: the connection: a training process's messages read and applied in
// order, its requests answered, the writer's state published in its header.
// The writer's life is in session_writer.cc, the journal in session_journal.cc.
#include "agent/session.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "agent/deadline.h"
#include "agent/handover.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "proto/tensorkeep.pb.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace agent {
namespace {

// How often an idle session refreshes the state in the client's header (stop
// requests and committed steps arrive with the collector's acks).
constexpr int kPublishIntervalMs = 20;
// While entries wait in the journal: how often the session offers them to
// the writer when the client is quiet (Drain, agent/session_journal.cc).
constexpr int kDrainIntervalMs = 2;
// File descriptors one message may carry (more is a violation).
constexpr size_t kMaxFds = 2;

using Clock = std::chrono::steady_clock;

// Little-endian fields of a message, bounds-checked.
class Fields {
 public:
  Fields(const std::vector<char>& bytes) : data_(bytes.data()), size_(bytes.size()) {}
  template <typename T>
  bool Read(T* out) {
    if (size_ - pos_ < sizeof(T)) return false;
    std::memcpy(out, data_ + pos_, sizeof(T));  // x86-64 and aarch64: little-endian
    pos_ += sizeof(T);
    return true;
  }
  bool ReadString(std::string* out, size_t max_bytes) {
    uint32_t n;
    if (!Read(&n) || n > max_bytes || size_ - pos_ < n) return false;
    out->assign(data_ + pos_, n);
    pos_ += n;
    return true;
  }
  const char* rest() const { return data_ + pos_; }
  void Skip(size_t n) { pos_ += n; }  // n <= rest_size()
  size_t rest_size() const { return size_ - pos_; }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

void CloseFds(std::vector<int>* fds) {
  for (int fd : *fds) close(fd);
  fds->clear();
}

absl::Status Violation(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("protocol violation: ", what));
}

}  // namespace

Session::Session(int fd, uint64_t id, AgentBudget* budget, double linger_seconds,
                 const JournalSettings* journal, const std::atomic<bool>* stopping,
                 std::atomic<size_t>* orphans)
    : fd_(fd),
      id_(id),
      budget_(budget),
      linger_seconds_(linger_seconds),
      journal_settings_(journal),
      stopping_(stopping),
      orphans_(orphans) {}

Session::~Session() { close(fd_); }

std::string Session::Name() const {
  if (!opened_) return absl::StrCat("client ", id_);
  return absl::StrCat("writer ", options_.worker, " of trial ", options_.trial, " (client ", id_,
                      ")");
}

void Session::Run() {
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, journal_ != nullptr ? kDrainIntervalMs : kPublishIntervalMs);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("{}: poll: {}", Name(), std::strerror(errno));
      break;
    }
    if (ready <= 0) {
      if (journal_ != nullptr) {
        (void)journal_->Sync();  // a quiet client: what it handed over is on disk
        Drain(false);
      }
      PublishState();
      continue;
    }
    Message message;
    if (!Receive(&message)) break;
    const absl::Status s = Handle(&message);
    CloseFds(&message.fds);
    if (journal_ != nullptr) Drain(false);
    PublishState();
    if (!s.ok()) {
      spdlog::error("{}: {}; disconnecting it (what it handed over before is still pushed)", Name(),
                    std::string(s.message()));
      break;
    }
    if (closed_) return;
  }
  Finish();
}

bool Session::Receive(Message* message) {
  message->bytes.resize(kMaxMessageBytes + 1);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  iovec iov{message->bytes.data(), message->bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    spdlog::error("{}: receive: {}", Name(), std::strerror(errno));
    return false;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        message->fds.push_back(fd);
      }
    }
  }
  if (n == 0 && message->fds.empty()) return false;  // the client is gone
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    spdlog::error(
        "{}: a message larger than {} bytes or with more than {} descriptors; "
        "disconnecting it",
        Name(), kMaxMessageBytes, kMaxFds);
    CloseFds(&message->fds);
    return false;
  }
  message->bytes.resize(static_cast<size_t>(n));
  return true;
}

absl::Status Session::Handle(Message* message) {
  Fields f(message->bytes);
  uint32_t type;
  if (!f.Read(&type)) return Violation("empty message");
  if (type == kOpen) return HandleOpen(message);
  if (!opened_) return Violation(absl::StrCat("message type ", type, " before Open"));
  if (type == kWrite || type == kWriteFd) return HandleWrite(message, type == kWriteFd);
  if (type == kBatch) return HandleBatch(message);
  uint32_t arg;
  uint64_t value;
  if (!f.Read(&arg) || !f.Read(&value)) return Violation("short control message");
  EnsureWriter();
  switch (type) {
    case kEndStep:
      if (error_.ok()) {
        Journal::Entry entry;
        entry.kind = Journal::Entry::kEndStep;
        entry.step = value;
        Put(std::move(entry));
      }
      return absl::OkStatus();
    case kFlush: {
      const absl::Status s = WaitDurable(DeadlineAfter(client_retry_timeout_), nullptr);
      PublishState();
      Reply(value, absl::IsDeadlineExceeded(s) ? NotYetDurable("flush") : s);
      return absl::OkStatus();
    }
    case kClose: {
      if (error_.ok() && journal_ != nullptr) {
        // Journaled too: a later agent replaying this journal closes alike.
        Journal::Entry entry;
        entry.kind = Journal::Entry::kClose;
        entry.end_of_training = arg != 0;
        if (journal_->Append(entry).ok()) (void)journal_->Sync();
      }
      const bool end_of_training = arg != 0;
      const absl::Status s = WaitDurable(DeadlineAfter(client_retry_timeout_), &end_of_training);
      closed_ = true;
      PublishState();
      if (absl::IsDeadlineExceeded(s)) {
        Reply(value, NotYetDurable("close"));
        Orphan(end_of_training);
        return absl::OkStatus();
      }
      writer_.reset();
      reservation_.Release();  // before the reply: the client may open another writer
      Reply(value, s);
      return absl::OkStatus();
    }
    case kSync:
      if (journal_ != nullptr) {
        const absl::Status s = journal_->Sync();
        if (!s.ok()) spdlog::error("{}: {}", Name(), std::string(s.message()));
      }
      Reply(value, error_);
      return absl::OkStatus();
    default:
      return Violation(absl::StrCat("unknown message type ", type));
  }
}

absl::Status Session::HandleOpen(Message* message) {
  if (opened_) return Violation("a second Open");
  Fields f(message->bytes);
  uint32_t type, version, num_workers;
  uint64_t ring_bytes, max_queue_bytes;
  double retry_timeout;
  std::string strings[7];
  f.Read(&type);
  if (!f.Read(&version)) return Violation("short Open");
  if (version != kProtocolVersion) {
    Reply(0, absl::FailedPreconditionError(absl::StrCat(
                 "tensorkeep-agent speaks hand-over protocol ", kProtocolVersion, ", the client ",
                 version,
                 ": stop the old agent (its socket is the one the "
                 "client connected to) or point TENSORKEEP_AGENT at a matching build")));
    return Violation("protocol version mismatch");
  }
  bool ok = f.Read(&num_workers) && f.Read(&ring_bytes) && f.Read(&max_queue_bytes) &&
            f.Read(&retry_timeout);
  for (auto& s : strings) ok = ok && f.ReadString(&s, 16 << 10);
  // Optional (clients before them send none): the job's attempt, then the
  // longest a step may wait before what it hands over is journaled.
  uint32_t attempt = 0;
  double max_stall = kDefaultMaxStallSeconds;
  if (ok && f.rest_size() > 0) ok = f.Read(&attempt);
  if (ok && f.rest_size() > 0) ok = f.Read(&max_stall) && f.rest_size() == 0;
  if (!ok) return Violation("malformed Open");
  if (message->fds.size() != 1) return Violation("Open without exactly one shared memory fd");
  absl::Status refused;
  if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes) {
    refused = absl::InvalidArgumentError(absl::StrCat(
        "ring of ", ring_bytes, " bytes: must be from ", kMinRingBytes, " to ", kMaxRingBytes));
  } else if (max_queue_bytes == 0 || max_queue_bytes > (uint64_t{1} << 40) ||
             !(retry_timeout >= 0) || !(max_stall >= 0)) {
    refused = absl::InvalidArgumentError(
        "max_queue_bytes, retry_timeout or max_stall_seconds out of range");
  }
  if (refused.ok()) {
    auto reservation =
        budget_->Reserve(kRegionHeaderBytes + ring_bytes + max_queue_bytes, "a writer");
    if (!reservation.ok()) {
      refused = reservation.status();
    } else {
      reservation_ = std::move(*reservation);
    }
  }
  if (refused.ok()) {
    const int fd = message->fds[0];
    message->fds.clear();
    auto region = SharedRegion::Map(fd, kRegionHeaderBytes + ring_bytes);
    if (!region.ok()) {
      refused = region.status();
    } else {
      region_ = std::move(*region);
      flags_ |= kFlagWakesRoomWaiters;
      region_->StoreU32(kFlagsOffset, flags_);
    }
  }
  if (!refused.ok()) {
    spdlog::warn("client {}: Open refused: {}", id_, std::string(refused.message()));
    Reply(0, refused);
    return Violation("Open refused");
  }
  ring_bytes_ = ring_bytes;
  options_.server = strings[0];
  options_.trial = strings[1];
  options_.worker = strings[2];
  options_.security.tls_ca = strings[3];
  options_.security.tls_cert = strings[4];
  options_.security.tls_key = strings[5];
  options_.security.token = strings[6];
  options_.num_workers = num_workers;
  options_.attempt = attempt;
  options_.max_buffered_bytes = max_queue_bytes;
  // Below gRPC's default 4 MiB receive limit, as the Python writer's batches.
  options_.chunk_bytes = (4u << 20) - (64u << 10);
  // With a journal the writer never gives up: what it cannot push waits in
  // the journal, and the client's retry_timeout bounds its Flush and Close.
  client_retry_timeout_ = retry_timeout;
  options_.retry_timeout_seconds =
      Journaling() ? std::numeric_limits<double>::infinity() : retry_timeout;
  // A step's tensors go as one message (--linger-ms).
  options_.linger_seconds = linger_seconds_;
  max_stall_seconds_ = max_stall;
  opened_ = true;
  spdlog::info("{}: opened (collector {}, ring {} MiB, max stall {} s)", Name(), options_.server,
               ring_bytes >> 20, max_stall);
  Reply(0, absl::OkStatus());
  return absl::OkStatus();
}

absl::Status Session::HandleBatch(Message* message) {
  if (!message->fds.empty()) return Violation("a Batch with file descriptors");
  Fields f(message->bytes);
  uint32_t type, count;
  f.Read(&type);
  if (!f.Read(&count)) return Violation("short Batch");
  Message inner;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t n;
    if (!f.Read(&n) || n < sizeof(uint32_t) || f.rest_size() < n) {
      return Violation("a Batch shorter than its count");
    }
    inner.bytes.assign(f.rest(), f.rest() + n);
    f.Skip(n);
    uint32_t inner_type;
    std::memcpy(&inner_type, inner.bytes.data(), sizeof(inner_type));
    if (inner_type != kWrite && inner_type != kEndStep) {
      return Violation(absl::StrCat("message type ", inner_type, " inside a Batch"));
    }
    TK_RETURN_IF_ERROR(Handle(&inner));
  }
  if (f.rest_size() != 0) return Violation("bytes after a Batch's last message");
  return absl::OkStatus();
}

absl::Status Session::HandleWrite(Message* message, bool own_fd) {
  Fields f(message->bytes);
  uint32_t type, zero;
  uint64_t pos, len;
  f.Read(&type);
  if (!f.Read(&zero) || !f.Read(&pos) || !f.Read(&len)) return Violation("short Write");
  v1::TensorRecord record;
  if (!record.ParseFromArray(f.rest(), static_cast<int>(f.rest_size()))) {
    return Violation("a Write whose record does not parse");
  }
  std::unique_ptr<SharedRegion> value_region;
  AgentBudget::Reservation value_reservation;
  if (own_fd) {
    if (message->fds.size() != 1) return Violation("WriteFd without exactly one fd");
    const int fd = message->fds[0];
    message->fds.clear();
    auto region = SharedRegion::Map(fd, len);
    if (!region.ok()) return region.status();
    value_region = std::move(*region);
    if (error_.ok()) {
      auto reservation = budget_->Reserve(
          len, absl::StrCat("tensor ", QuoteInput(record.name()), " of step ", record.step()));
      if (!reservation.ok()) {
        SetError(reservation.status());
      } else {
        value_reservation = std::move(*reservation);
      }
    }
    if (record.has_value()) record.set_data(std::string(value_region->Bytes(0, len)));
  } else {
    if (!message->fds.empty()) return Violation("Write with a file descriptor");
    if (len > 0) {
      const uint64_t offset = ring_bytes_ == 0 ? 0 : pos % ring_bytes_;
      if (pos < consumed_ || len > ring_bytes_ || offset + len > ring_bytes_) {
        return Violation(absl::StrCat("value at ring position ", pos, " (", len,
                                      " bytes) outside the ring of ", ring_bytes_,
                                      " bytes taken through ", consumed_));
      }
      if (record.has_value())
        record.set_data(std::string(region_->Bytes(kRegionHeaderBytes + offset, len)));
      consumed_ = pos + len;
      region_->StoreU64(kConsumedOffset, consumed_);
      region_->WakeWaiters(kConsumedOffset, consumed_, kRoomWantedOffset);
    }
  }
  EnsureWriter();
  if (!error_.ok()) return absl::OkStatus();
  if (absl::Status s = client::Writer::Validate(&record); !s.ok()) {
    SetError(s);
    return absl::OkStatus();
  }
  Journal::Entry entry;
  entry.record = std::move(record);
  const bool direct = journal_ == nullptr;
  Put(std::move(entry));
  if (own_fd && direct && journal_ == nullptr && error_.ok() && writer_ != nullptr) {
    // Its memory is held only until durable, or for as long as a step may
    // wait (the writer holds it after that, outside the budget).
    auto ticket = writer_->RequestFlush();
    absl::Status s = ticket.status();
    if (s.ok()) s = writer_->WaitFlushed(*ticket, DeadlineAfter(max_stall_seconds_));
    if (!s.ok() && !absl::IsDeadlineExceeded(s)) SetError(s);
  }
  return absl::OkStatus();
}

void Session::SetError(const absl::Status& status) {
  if (!error_.ok()) return;
  error_ = status;
  flags_ |= kFlagFailed;
  if (region_ != nullptr) {
    region_->StoreU32(kFlagsOffset, flags_);
    // A client waiting for room learns of the failure now (mostly: see WakeWaiters).
    region_->WakeWaiters(kConsumedOffset, consumed_, kRoomWantedOffset, /*always=*/true);
  }
}

void Session::PublishState() {
  if (region_ == nullptr) return;
  if (journaled_bytes_ != published_journaled_) {
    published_journaled_ = journaled_bytes_;
    region_->StoreU64(kJournaledBytesOffset, journaled_bytes_);
  }
  if (dropped_records_ != published_dropped_) {
    published_dropped_ = dropped_records_;
    region_->StoreU64(kDroppedRecordsOffset, dropped_records_);
  }
  uint32_t flags = flags_;
  if (journal_ != nullptr) {
    flags |= kFlagJournaling;
  } else {
    flags &= ~kFlagJournaling;
  }
  if (writer_ == nullptr) {
    if (flags != flags_) {
      flags_ = flags;
      region_->StoreU32(kFlagsOffset, flags_);
    }
    return;
  }
  if (writer_->StopRequested() && (flags_ & kFlagStopRequested) == 0) {
    flags |= kFlagStopRequested;
    const std::string reason = writer_->StopReason().substr(0, kMaxStopReasonBytes);
    const uint32_t len = reason.size();
    std::memcpy(region_->Mutable(kStopReasonOffset + 4), reason.data(), len);
    region_->StoreU32(kStopReasonOffset, len);
  }
  const int64_t committed = writer_->CommittedThrough();
  if (committed != committed_through_) {
    committed_through_ = committed;
    region_->StoreU64(kCommittedThroughOffset, static_cast<uint64_t>(committed));
  }
  const uint64_t streams = writer_->StreamsOpened();
  if (streams != streams_opened_) {
    streams_opened_ = streams;
    region_->StoreU64(kStreamsOpenedOffset, streams);
  }
  if (flags != flags_) {
    flags_ = flags;
    region_->StoreU32(kFlagsOffset, flags_);
  }
}

void Session::Reply(uint64_t request_id, const absl::Status& status) {
  std::string out;
  const auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint32_t type = kReply;
  const uint32_t ok = status.ok() ? 1 : 0;
  put(&type, 4);
  put(&ok, 4);
  put(&request_id, 8);
  if (!status.ok()) {
    const int32_t code = static_cast<int32_t>(status.code());
    put(&code, 4);
    const std::string reason(ReasonName(GetReason(status)));
    // The message is cut to fit one message of the socket.
    const std::string text(status.message().substr(0, 16 << 10));
    const uint32_t reason_len = reason.size(), text_len = text.size();
    put(&reason_len, 4);
    out += reason;
    put(&text_len, 4);
    out += text;
  }
  if (send(fd_, out.data(), out.size(), MSG_NOSIGNAL) < 0) {
    spdlog::debug("{}: reply not delivered: {}", Name(), std::strerror(errno));
  }
}

void Session::Finish() {
  if (!opened_ || closed_) return;
  // The training process went away without closing: push what it handed
  // over, then close without end-of-training (the worker is not finished).
  spdlog::warn(
      "{}: the training process disconnected without closing; pushing what it handed "
      "over and closing the worker as not finished",
      Name());
  EnsureWriter();
  Orphan(false);
}

}  // namespace agent
}  // namespace tensorkeep
