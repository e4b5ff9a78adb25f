#include "storage/pread_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tensorkeep {
namespace {

leveldb::Status PosixError(const std::string& context, int error) {
  if (error == ENOENT) return leveldb::Status::NotFound(context, std::strerror(error));
  return leveldb::Status::IOError(context, std::strerror(error));
}

class PreadFile : public leveldb::RandomAccessFile {
 public:
  PreadFile(std::string name, int fd) : name_(std::move(name)), fd_(fd) {}
  ~PreadFile() override { close(fd_); }

  // Thread-safe: pread has no file position.
  leveldb::Status Read(uint64_t offset, size_t n, leveldb::Slice* result,
                       char* scratch) const override {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = pread(fd_, scratch + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        *result = leveldb::Slice(scratch, 0);
        return PosixError(name_, errno);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    *result = leveldb::Slice(scratch, done);
    return leveldb::Status::OK();
  }

 private:
  const std::string name_;
  const int fd_;
};

class PreadEnvImpl : public leveldb::EnvWrapper {
 public:
  explicit PreadEnvImpl(leveldb::Env* base) : leveldb::EnvWrapper(base) {}

  leveldb::Status NewRandomAccessFile(const std::string& name,
                                      leveldb::RandomAccessFile** result) override {
    const int fd = open(name.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      *result = nullptr;
      return PosixError(name, errno);
    }
    *result = new PreadFile(name, fd);
    return leveldb::Status::OK();
  }
};

}  // namespace

std::unique_ptr<leveldb::Env> NewPreadEnv(leveldb::Env* base) {
  return std::make_unique<PreadEnvImpl>(base);
}

}  // namespace tensorkeep
