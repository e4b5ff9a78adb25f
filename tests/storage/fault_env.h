// FaultEnv: a leveldb::EnvWrapper that injects the faults a collector meets
// on a real disk, in the manner of LevelDB's own fault_injection_test.cc:
//  - appends that fail (ENOSPC, EIO), optionally after writing part of the
//    data (a short write), to the files whose names match a filter;
//  - syncs that fail;
//  - a power cut: DropUnsyncedData() cuts every file back to what was last
//    synced (files never synced become empty), as a machine that lost power
//    keeps only what fsync made durable.
// Directory entries are treated as durable (LevelDB syncs the directory only
// for its MANIFEST; we model file contents, which is what --sync promises).
//
// Thread safety: every method may be called from any thread.
#ifndef TENSORKEEP_TESTS_STORAGE_FAULT_ENV_H_
#define TENSORKEEP_TESTS_STORAGE_FAULT_ENV_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "leveldb/env.h"

namespace tensorkeep {
namespace testing {

class FaultEnv : public leveldb::EnvWrapper {
 public:
  // `base` is not owned and must outlive this Env (usually a MemEnv).
  explicit FaultEnv(leveldb::Env* base) : EnvWrapper(base) {}

  // Appends to files whose name contains `filter` ("" = every file) fail
  // while `n` > 0 (each failure counts one), with "No space left on device".
  // With `short_write`, half of the data is written before the failure.
  // (After letting the next `after` such appends through.)
  void FailAppends(const std::string& filter, int n, bool short_write = false, int after = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    append_filter_ = filter;
    short_write_ = short_write;
    failing_appends_ = n;
    appends_let_through_ = after;
  }
  // Syncs of files whose name contains `filter` fail while `n` > 0.
  void FailSyncs(const std::string& filter, int n) {
    std::lock_guard<std::mutex> lock(mu_);
    sync_filter_ = filter;
    failing_syncs_ = n;
  }
  int appends_failed() const { return appends_failed_.load(); }

  // The power cut: every file written through this Env keeps only its synced
  // prefix. Call with nothing open for writing (the store closed).
  void DropUnsyncedData() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, state] : files_) {
      uint64_t size = 0;
      if (!target()->GetFileSize(name, &size).ok() || size <= state.synced) continue;
      std::string data;
      leveldb::ReadFileToString(target(), name, &data);
      data.resize(state.synced);
      leveldb::WritableFile* f = nullptr;
      if (target()->NewWritableFile(name, &f).ok()) {
        f->Append(data);
        f->Close();
        delete f;
      }
      ++files_cut_;
    }
  }
  int files_cut() const { return files_cut_; }

  leveldb::Status NewWritableFile(const std::string& name,
                                  leveldb::WritableFile** result) override {
    leveldb::WritableFile* f = nullptr;
    leveldb::Status s = target()->NewWritableFile(name, &f);
    if (!s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      files_[name] = FileState{};
    }
    *result = new File(f, name, this, 0);
    return s;
  }
  leveldb::Status NewAppendableFile(const std::string& name,
                                    leveldb::WritableFile** result) override {
    leveldb::WritableFile* f = nullptr;
    leveldb::Status s = target()->NewAppendableFile(name, &f);
    if (!s.ok()) return s;
    uint64_t size = 0;
    target()->GetFileSize(name, &size);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto [it, created] = files_.try_emplace(name);
      if (created) it->second.synced = size;  // what existed before counts as durable
    }
    *result = new File(f, name, this, size);
    return s;
  }
  leveldb::Status RemoveFile(const std::string& name) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      files_.erase(name);
    }
    return target()->RemoveFile(name);
  }
  leveldb::Status RenameFile(const std::string& from, const std::string& to) override {
    leveldb::Status s = target()->RenameFile(from, to);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = files_.find(from);
      if (it != files_.end()) {
        files_[to] = it->second;
        files_.erase(from);
      } else {
        files_.erase(to);
      }
    }
    return s;
  }

 private:
  struct FileState {
    uint64_t synced = 0;
  };

  class File : public leveldb::WritableFile {
   public:
    File(leveldb::WritableFile* f, std::string name, FaultEnv* env, uint64_t size)
        : f_(f), name_(std::move(name)), env_(env), size_(size) {}
    leveldb::Status Append(const leveldb::Slice& data) override {
      bool short_write = false;
      if (env_->ShouldFailAppend(name_, &short_write)) {
        if (short_write && data.size() > 1) {
          const leveldb::Slice half(data.data(), data.size() / 2);
          if (f_->Append(half).ok()) size_ += half.size();
          f_->Flush();
        }
        return leveldb::Status::IOError(name_, "No space left on device");
      }
      leveldb::Status s = f_->Append(data);
      if (s.ok()) size_ += data.size();
      return s;
    }
    leveldb::Status Close() override { return f_->Close(); }
    leveldb::Status Flush() override { return f_->Flush(); }
    leveldb::Status Sync() override {
      if (env_->ShouldFailSync(name_)) return leveldb::Status::IOError(name_, "Input/output error");
      leveldb::Status s = f_->Sync();
      if (s.ok()) env_->Synced(name_, size_);
      return s;
    }

   private:
    std::unique_ptr<leveldb::WritableFile> f_;
    const std::string name_;
    FaultEnv* const env_;
    uint64_t size_;
  };

  bool ShouldFailAppend(const std::string& name, bool* short_write) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failing_appends_ <= 0 || name.find(append_filter_) == std::string::npos) return false;
    if (appends_let_through_ > 0) {
      --appends_let_through_;
      return false;
    }
    --failing_appends_;
    ++appends_failed_;
    *short_write = short_write_;
    return true;
  }
  bool ShouldFailSync(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failing_syncs_ <= 0 || name.find(sync_filter_) == std::string::npos) return false;
    --failing_syncs_;
    return true;
  }
  void Synced(const std::string& name, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(name);
    if (it != files_.end()) it->second.synced = size;
  }

  std::mutex mu_;
  std::map<std::string, FileState> files_;
  std::string append_filter_, sync_filter_;
  int failing_appends_ = 0;
  int failing_syncs_ = 0;
  bool short_write_ = false;
  std::atomic<int> appends_failed_{0};
  int appends_let_through_ = 0;
  int files_cut_ = 0;
};

}  // namespace testing
}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_STORAGE_FAULT_ENV_H_
