#include "agent/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "tfrecord/crc32c.h"

namespace tensorkeep {
namespace agent {
namespace {

constexpr char kMagic[8] = {'T', 'K', 'J', 'R', 'N', 'L', '1', '\n'};
constexpr uint64_t kFrameHead = 8;
// A frame longer than this is torn (a record is at most a value's bytes,
// which the collector bounds far below, plus its fields).
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 32;

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

void PutString(std::string* out, const std::string& s) {
  const uint32_t n = s.size();
  out->append(reinterpret_cast<const char*>(&n), 4);
  out->append(s);
}

bool GetString(const std::string& in, size_t* pos, std::string* out) {
  uint32_t n;
  if (in.size() - *pos < 4) return false;
  std::memcpy(&n, in.data() + *pos, 4);
  *pos += 4;
  if (in.size() - *pos < n) return false;
  out->assign(in.data() + *pos, n);
  *pos += n;
  return true;
}

absl::Status WriteAll(int fd, const char* p, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t w = pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return absl::OkStatus();
}

bool ReadAll(int fd, char* p, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t r = pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

void SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
}

}  // namespace

bool JournalSpace::Take(uint64_t n) {
  uint64_t used = used_.load();
  do {
    if (used + n > limit_) return false;
  } while (!used_.compare_exchange_weak(used, used + n));
  return true;
}

Journal::Journal(int fd, std::string path, JournalSpace* space)
    : fd_(fd), path_(std::move(path)), space_(space) {}

Journal::~Journal() {
  if (fd_ >= 0) close(fd_);
  if (!removed_) space_->Give(size_);
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Create(const std::string& dir,
                                                         const std::string& name,
                                                         const Header& header,
                                                         JournalSpace* space) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Errno("mkdir", dir);
  const std::string path = absl::StrCat(dir, "/", name, kSuffix);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("create", path);
  std::unique_ptr<Journal> j(new Journal(fd, path, space));
  if (!space->Take(sizeof(kMagic))) {
    j->Remove();
    return absl::ResourceExhaustedError("the journal space is used up");
  }
  j->size_ = sizeof(kMagic);
  if (absl::Status s = WriteAll(fd, kMagic, sizeof(kMagic), 0, path); !s.ok()) {
    j->Remove();
    return s;
  }
  std::string payload(1, static_cast<char>(Entry::kHeader));
  PutString(&payload, header.target);
  PutString(&payload, header.trial);
  PutString(&payload, header.worker);
  payload.append(reinterpret_cast<const char*>(&header.num_workers), 4);
  payload.append(reinterpret_cast<const char*>(&header.attempt), 4);
  absl::Status s = j->AppendPayload(payload);
  if (s.ok()) s = j->Sync();
  if (!s.ok()) {
    j->Remove();
    return s;
  }
  SyncDir(dir);
  j->data_start_ = j->read_pos_ = j->size_;
  return j;
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::OpenExisting(const std::string& path,
                                                               JournalSpace* space,
                                                               Header* header) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  std::unique_ptr<Journal> j(new Journal(fd, path, space));
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno("stat", path);
  const uint64_t end = static_cast<uint64_t>(st.st_size);
  char magic[sizeof(kMagic)];
  if (end < sizeof(kMagic) || !ReadAll(fd, magic, sizeof(magic), 0) ||
      std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(path, " is not a tensorkeep-agent journal"));
  }
  std::string payload;
  uint64_t pos = sizeof(kMagic), next = 0;
  size_t p = 1;
  if (!j->ReadFrame(pos, end, &payload, &next) || payload.empty() ||
      payload[0] != Entry::kHeader || !GetString(payload, &p, &header->target) ||
      !GetString(payload, &p, &header->trial) || !GetString(payload, &p, &header->worker) ||
      payload.size() - p != 8) {
    return absl::DataLossError(absl::StrCat(path, ": its header is torn or malformed"));
  }
  std::memcpy(&header->num_workers, payload.data() + p, 4);
  std::memcpy(&header->attempt, payload.data() + p + 4, 4);
  j->data_start_ = j->read_pos_ = pos = next;
  while (j->ReadFrame(pos, end, &payload, &next)) {
    pos = next;
    ++j->entries_;
  }
  if (pos != end) {
    spdlog::warn("journal {}: discarding a torn tail of {} bytes after {} whole entries", path,
                 end - pos, j->entries_);
    if (ftruncate(fd, static_cast<off_t>(pos)) != 0) return Errno("truncate", path);
    if (fsync(fd) != 0) return Errno("fsync", path);
  }
  j->size_ = pos;
  // A leftover journal counts in the space even past its limit (it exists).
  space->Add(pos);
  return j;
}

absl::Status Journal::AppendPayload(const std::string& payload) {
  const uint64_t n = kFrameHead + payload.size();
  if (!space_->Take(n)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the agent's journals would exceed their ", space_->limit() >> 20,
                     " MiB (tensorkeep-agent --journal-max-mb)"));
  }
  char head[kFrameHead];
  const uint32_t len = payload.size();
  const uint32_t crc = tfrecord::MaskedCrc32c(payload);
  std::memcpy(head, &len, 4);
  std::memcpy(head + 4, &crc, 4);
  absl::Status s = WriteAll(fd_, head, sizeof(head), size_, path_);
  if (s.ok()) s = WriteAll(fd_, payload.data(), payload.size(), size_ + kFrameHead, path_);
  if (!s.ok()) {
    space_->Give(n);
    // A partial frame may be on disk: cut it off (a later reader would
    // discard it as torn anyway).
    (void)!ftruncate(fd_, static_cast<off_t>(size_));
    return s;
  }
  size_ += n;
  dirty_ = true;
  return absl::OkStatus();
}

absl::Status Journal::Append(const Entry& entry) {
  std::string payload(1, static_cast<char>(entry.kind));
  switch (entry.kind) {
    case Entry::kRecord:
      if (!entry.record.AppendToString(&payload)) {
        return absl::InternalError("a record that does not serialize");
      }
      break;
    case Entry::kEndStep:
      payload.append(reinterpret_cast<const char*>(&entry.step), 8);
      break;
    case Entry::kClose:
      payload.push_back(entry.end_of_training ? 1 : 0);
      break;
    default:
      return absl::InternalError("a journal entry of an unknown kind");
  }
  absl::Status s = AppendPayload(payload);
  if (s.ok()) ++entries_;
  return s;
}

absl::Status Journal::Sync() {
  if (!dirty_) return absl::OkStatus();
  if (fdatasync(fd_) != 0) return Errno("fsync", path_);
  dirty_ = false;
  return absl::OkStatus();
}

bool Journal::ReadFrame(uint64_t pos, uint64_t end, std::string* payload, uint64_t* next) const {
  if (end - pos < kFrameHead) return false;
  char head[kFrameHead];
  if (!ReadAll(fd_, head, sizeof(head), pos)) return false;
  uint32_t len, crc;
  std::memcpy(&len, head, 4);
  std::memcpy(&crc, head + 4, 4);
  if (len == 0 || len >= kMaxFrameBytes || end - pos - kFrameHead < len) return false;
  payload->resize(len);
  if (!ReadAll(fd_, payload->data(), len, pos + kFrameHead)) return false;
  if (tfrecord::MaskedCrc32c(*payload) != crc) return false;
  *next = pos + kFrameHead + len;
  return true;
}

absl::StatusOr<bool> Journal::Read(Entry* entry) {
  if (read_pos_ >= size_) return false;
  std::string payload;
  uint64_t next;
  if (!ReadFrame(read_pos_, size_, &payload, &next)) {
    return absl::DataLossError(
        absl::StrCat("journal ", path_, ": the entry at byte ", read_pos_, " does not read back"));
  }
  const auto kind = static_cast<Entry::Kind>(static_cast<uint8_t>(payload[0]));
  const char* body = payload.data() + 1;
  const size_t n = payload.size() - 1;
  entry->kind = kind;
  bool ok = false;
  switch (kind) {
    case Entry::kRecord:
      ok = entry->record.ParseFromArray(body, static_cast<int>(n));
      break;
    case Entry::kEndStep:
      ok = n == 8;
      if (ok) std::memcpy(&entry->step, body, 8);
      break;
    case Entry::kClose:
      ok = n == 1;
      if (ok) entry->end_of_training = body[0] != 0;
      break;
    default:
      break;
  }
  if (!ok) {
    return absl::DataLossError(
        absl::StrCat("journal ", path_, ": the entry at byte ", read_pos_, " is malformed"));
  }
  read_pos_ = next;
  return true;
}

void Journal::Remove() {
  if (removed_) return;
  removed_ = true;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  unlink(path_.c_str());
  SyncDir(DirOf(path_));
  space_->Give(size_);
}

}  // namespace agent
}  // namespace tensorkeep
