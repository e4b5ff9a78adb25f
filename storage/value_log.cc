#include "storage/value_log.h"

#include <fcntl.h>
#include <libdeflate.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "leveldb/env.h"

namespace tensorkeep {
namespace {

constexpr std::string_view kSuffix = ".vlog";

absl::Status IoError(const leveldb::Status& s, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

// fsync of a directory, so that the files created in it survive power loss
// (LevelDB's Env syncs directories only for its own MANIFEST files).
absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("opening ", dir, ": ", std::strerror(errno)));
  const int r = fsync(fd);
  const int error = errno;
  close(fd);
  if (r != 0) return absl::InternalError(absl::StrCat("syncing ", dir, ": ", std::strerror(error)));
  return absl::OkStatus();
}

}  // namespace

uint32_t ValueChecksum(std::string_view data) {
  return libdeflate_crc32(0, data.data(), data.size());
}

ValueLog::ValueLog(leveldb::Env* env, std::string dir, uint64_t next_file, bool sync_directory,
                   uint64_t max_file_bytes, size_t max_lanes)
    : env_(env),
      dir_(std::move(dir)),
      sync_directory_(sync_directory),
      max_file_bytes_(max_file_bytes),
      next_file_(next_file),
      lanes_(1 + std::max<size_t>(1, max_lanes)) {
  lanes_[0].keyed = true;  // the empty key's
}

ValueLog::~ValueLog() {
  absl::MutexLock lock(&write_mu_);
  for (auto& f : unsynced_closed_) f->Close();
  for (Lane& lane : lanes_) {
    if (lane.out != nullptr) lane.out->Close();
  }
}

absl::StatusOr<std::unique_ptr<ValueLog>> ValueLog::Open(leveldb::Env* env, std::string dir,
                                                         bool sync_directory,
                                                         uint64_t max_file_bytes,
                                                         size_t max_lanes) {
  std::vector<std::string> children;
  uint64_t last = 0;
  leveldb::Status listed = env->GetChildren(dir, &children);
  // A directory that does not exist yet holds no files.
  if (!listed.ok() && !listed.IsNotFound()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot list the value files in ", dir, ": ", listed.ToString()));
  }
  if (listed.ok()) {
    for (std::string_view name : children) {
      if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) {
        continue;
      }
      uint64_t n = 0;
      const std::string_view digits = name.substr(0, name.size() - kSuffix.size());
      if (absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &n)) {
        last = std::max(last, n);
      }
    }
  }
  return std::unique_ptr<ValueLog>(
      new ValueLog(env, std::move(dir), last + 1, sync_directory, max_file_bytes, max_lanes));
}

std::string ValueLog::FileName(uint64_t file) const {
  return absl::StrFormat("%s/%06d%s", dir_, file, kSuffix);
}

void ValueLog::RetireFile(Lane* lane) {
  if (lane->out == nullptr) return;
  if (lane->unsynced) {
    unsynced_closed_.push_back(std::move(lane->out));  // synced, then closed, by the next Sync
  } else {
    lane->out->Close();
  }
  lane->out.reset();
  lane->unsynced = false;
}

absl::Status ValueLog::StartFile(Lane* lane) {
  if (!dir_created_) {
    env_->CreateDir(dir_);  // fails when it exists; opening the file below says if it is unusable
    dir_created_ = true;
  }
  RetireFile(lane);
  const uint64_t number = next_file_++;
  leveldb::WritableFile* f = nullptr;
  leveldb::Status s = env_->NewWritableFile(FileName(number), &f);
  if (!s.ok()) return IoError(s, absl::StrCat("creating value file ", FileName(number)));
  lane->out.reset(f);
  lane->file = number;
  lane->file_size = 0;
  directory_unsynced_ = true;
  return absl::OkStatus();
}

ValueLog::Lane* ValueLog::LaneFor(std::string_view key) {
  if (key.empty()) return &lanes_[0];
  Lane* chosen = nullptr;
  for (size_t i = 1; i < lanes_.size(); ++i) {
    Lane& lane = lanes_[i];
    if (lane.keyed && lane.key == key) return &lane;
    // A lane no key holds first, else the one used least recently.
    if (chosen == nullptr || (chosen->keyed && (!lane.keyed || lane.last_use < chosen->last_use))) {
      chosen = &lane;
    }
  }
  // Taken over: the file goes on (a new one a lane would make many small
  // files when more keys than lanes take turns).
  chosen->key.assign(key.data(), key.size());
  chosen->keyed = true;
  return chosen;
}

absl::StatusOr<ValueLog::Position> ValueLog::Append(std::string_view data, std::string_view key) {
  return AppendPieces(&data, 1, key);
}

absl::StatusOr<ValueLog::Position> ValueLog::Append(const std::vector<std::string>& pieces,
                                                    std::string_view key) {
  std::vector<std::string_view> views(pieces.begin(), pieces.end());
  return AppendPieces(views.data(), views.size(), key);
}

absl::StatusOr<ValueLog::Position> ValueLog::AppendPieces(const std::string_view* pieces,
                                                          size_t count, std::string_view key) {
  absl::MutexLock lock(&write_mu_);
  Lane* lane = LaneFor(key);
  lane->last_use = ++appends_;
  if (lane->out == nullptr || lane->file_size >= max_file_bytes_) {
    absl::Status started = StartFile(lane);
    if (!started.ok()) return started;
  }
  const Position at{lane->file, lane->file_size};
  uint64_t size = 0;
  for (size_t i = 0; i < count; ++i) size += pieces[i].size();
  leveldb::Status s;
  // A large piece goes straight to write(2) (LevelDB's buffer takes only what fits in it).
  for (size_t i = 0; i < count && s.ok(); ++i) {
    s = lane->out->Append(leveldb::Slice(pieces[i].data(), pieces[i].size()));
  }
  if (s.ok()) s = lane->out->Flush();  // out of LevelDB's user-space buffer: a crash keeps it
  if (!s.ok()) {
    // The file's end is unknown now: the lane's next Append starts another
    // file. The bytes before this write still need the next Sync. A file
    // that holds nothing but this failed write is removed, so that a disk
    // that keeps failing does not collect a file per attempt.
    if (at.offset == 0) {
      lane->out->Close();
      lane->out.reset();
      lane->unsynced = false;
      env_->RemoveFile(FileName(at.file));
    } else {
      lane->unsynced = true;
      RetireFile(lane);
    }
    return IoError(s, absl::StrCat("writing ", size, " bytes to ", FileName(at.file)));
  }
  lane->file_size += size;
  lane->unsynced = true;
  return at;
}

absl::Status ValueLog::Sync() {
  absl::MutexLock lock(&write_mu_);
  // One at a time, so that a failure leaves the files not yet synced listed.
  while (!unsynced_closed_.empty()) {
    leveldb::Status s = unsynced_closed_.front()->Sync();
    if (!s.ok()) return IoError(s, "syncing a value file");
    unsynced_closed_.front()->Close();
    unsynced_closed_.erase(unsynced_closed_.begin());
  }
  for (Lane& lane : lanes_) {
    if (!lane.unsynced || lane.out == nullptr) continue;
    leveldb::Status s = lane.out->Sync();
    if (!s.ok()) {
      // What a failed fsync left on disk is unknown (the kernel may have
      // dropped the pages): stop appending to this file. It stays listed, so
      // the next Sync tries it again before anything after it counts.
      const uint64_t file = lane.file;
      RetireFile(&lane);
      return IoError(s, absl::StrCat("syncing ", FileName(file)));
    }
    lane.unsynced = false;
  }
  if (directory_unsynced_ && sync_directory_) {
    absl::Status s = SyncDirectory(dir_);
    if (!s.ok()) return s;
  }
  directory_unsynced_ = false;
  return absl::OkStatus();
}

std::vector<uint64_t> ValueLog::active_files() {
  absl::MutexLock lock(&write_mu_);
  std::vector<uint64_t> out;
  for (const Lane& lane : lanes_) {
    if (lane.out != nullptr) out.push_back(lane.file);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ValueLog::Rotate(uint64_t file) {
  absl::MutexLock lock(&write_mu_);
  for (Lane& lane : lanes_) {
    if (lane.out != nullptr && lane.file == file) RetireFile(&lane);
  }
}

std::vector<std::pair<uint64_t, uint64_t>> ValueLog::Files() {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  std::vector<std::string> children;
  if (!env_->GetChildren(dir_, &children).ok()) return out;
  for (std::string_view name : children) {
    if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) {
      continue;
    }
    uint64_t n = 0;
    const std::string_view digits = name.substr(0, name.size() - kSuffix.size());
    if (!absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &n)) continue;
    uint64_t size = 0;
    if (!env_->GetFileSize(FileName(n), &size).ok()) continue;
    out.emplace_back(n, size);
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::Status ValueLog::Drop(uint64_t file) {
  {
    absl::MutexLock lock(&read_mu_);
    readers_.erase(file);
  }
  leveldb::Status s = env_->RemoveFile(FileName(file));
  if (!s.ok() && !s.IsNotFound()) return IoError(s, absl::StrCat("removing ", FileName(file)));
  if (sync_directory_) return SyncDirectory(dir_);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<leveldb::RandomAccessFile>> ValueLog::Reader(uint64_t file) {
  absl::MutexLock lock(&read_mu_);
  auto it = readers_.find(file);
  if (it != readers_.end()) return it->second;
  leveldb::RandomAccessFile* f = nullptr;
  leveldb::Status s = env_->NewRandomAccessFile(FileName(file), &f);
  if (!s.ok()) {
    return absl::DataLossError(absl::StrCat("value file ", FileName(file), " cannot be opened (",
                                            s.ToString(), "): the data directory is damaged"));
  }
  // Reads in flight keep a dropped handle alive (shared_ptr).
  if (readers_.size() >= kMaxOpenFiles) readers_.erase(readers_.begin());
  std::shared_ptr<leveldb::RandomAccessFile> reader(f);
  readers_.emplace(file, reader);
  return reader;
}

absl::Status ValueLog::Truncated(const storage::ValueRef& ref) const {
  return absl::DataLossError(absl::StrCat(FileName(ref.file()), " ends before the ", ref.size(),
                                          " bytes at offset ", ref.offset(),
                                          ": the file was truncated"));
}

absl::Status ValueLog::Damaged(const storage::ValueRef& ref) const {
  return absl::DataLossError(absl::StrCat("the ", ref.size(), " bytes at offset ", ref.offset(),
                                          " of ", FileName(ref.file()),
                                          " do not match their checksum: the file is damaged"));
}

bool ValueLog::FileHolds(const storage::ValueRef& ref) const {
  if (ref.size() <= (uint64_t{64} << 20)) return true;  // the read itself finds out
  uint64_t file_size = 0;
  return env_->GetFileSize(FileName(ref.file()), &file_size).ok() && ref.offset() <= file_size &&
         ref.size() <= file_size - ref.offset();
}

namespace {

// Reads `n` bytes at `offset` of `file` into `out` (resized to n). `name`
// gives the file's name for an error (only then: formatting it costs as
// much as a small read's checksum).
absl::Status ReadAt(leveldb::RandomAccessFile* file, uint64_t offset, size_t n, std::string* out,
                    const std::function<absl::Status()>& truncated,
                    const std::function<std::string()>& name) {
  out->resize(n);
  leveldb::Slice got;
  leveldb::Status s = file->Read(offset, n, &got, out->data());
  if (!s.ok()) {
    return absl::DataLossError(
        absl::StrCat("reading ", n, " bytes at offset ", offset, " of ", name(), ": ", s.ToString()));
  }
  if (got.size() != n) return truncated();
  if (got.data() != out->data()) std::memcpy(out->data(), got.data(), got.size());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ValueLog::Cursor>> ValueLog::OpenCursor(
    const storage::ValueRef& ref) {
  auto reader = Reader(ref.file());
  if (!reader.ok()) return reader.status();
  if (!FileHolds(ref)) return Truncated(ref);
  return std::unique_ptr<Cursor>(new Cursor(this, *std::move(reader), ref));
}

absl::StatusOr<std::string> ValueLog::Read(const storage::ValueRef& ref) {
  TK_ASSIGN_OR_RETURN(std::unique_ptr<Cursor> cursor, OpenCursor(ref));
  std::string out;
  TK_RETURN_IF_ERROR(cursor->Read(ref.size(), &out));
  return out;
}

absl::Status ValueLog::Cursor::Read(size_t max_bytes, std::string* out) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(max_bytes, remaining()));
  TK_RETURN_IF_ERROR(ReadAt(
      file_.get(), ref_.offset() + done_, n, out, [&] { return log_->Truncated(ref_); },
      [&] { return log_->FileName(ref_.file()); }));
  crc_ = libdeflate_crc32(crc_, out->data(), out->size());
  done_ += n;
  if (done_ == ref_.size() && crc_ != ref_.crc32()) return log_->Damaged(ref_);
  return absl::OkStatus();
}

}  // namespace tensorkeep
