#include "agent/journal_replay.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/writer.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace agent {
namespace {

// Errors worth trying again at the next start (the collector away), as
// opposed to a refusal of the data itself.
bool Retryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) ||
         absl::IsUnknown(s) || absl::IsInternal(s) || absl::IsResourceExhausted(s);
}

}  // namespace

std::vector<std::string> LeftoverJournals(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (absl::EndsWith(name, Journal::kSuffix)) out.push_back(absl::StrCat(dir, "/", name));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string JournalWriterKey(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  // TRIAL and WORKER are made file-safe (no dots) when the name is made.
  const size_t first = name.find('.');
  const size_t second = first == std::string::npos ? first : name.find('.', first + 1);
  return second == std::string::npos ? name : name.substr(0, second);
}

bool ReplayJournal(const std::string& path, JournalSpace* space, double linger_seconds) {
  Journal::Header header;
  auto opened = Journal::OpenExisting(path, space, &header);
  if (!opened.ok()) {
    spdlog::error("leftover journal {}: {}; renaming it to {}.failed", path,
                  std::string(opened.status().message()), path);
    std::rename(path.c_str(), absl::StrCat(path, ".failed").c_str());
    return true;
  }
  std::unique_ptr<Journal> journal = std::move(*opened);
  spdlog::warn(
      "leftover journal {}: {} entries of writer {} of trial {} that an earlier agent could not "
      "push; pushing them to {}",
      path, journal->entries(), header.worker, header.trial, header.target);
  client::WriterOptions options;
  options.server = header.target;
  options.trial = header.trial;
  options.worker = header.worker;
  options.num_workers = header.num_workers;
  options.attempt = header.attempt;
  options.chunk_bytes = (4u << 20) - (64u << 10);  // as a session's writer
  options.linger_seconds = linger_seconds;
  absl::Status s;
  auto writer = client::Writer::Open(options, options.retry_timeout_seconds);
  if (!writer.ok()) {
    s = writer.status();
  } else {
    bool closed = false;
    Journal::Entry entry;
    while (s.ok() && !closed) {
      const absl::StatusOr<bool> read = journal->Read(&entry);
      if (!read.ok()) {
        s = read.status();
        break;
      }
      if (!*read) break;
      switch (entry.kind) {
        case Journal::Entry::kRecord:
          s = (*writer)->Write(std::move(entry.record));
          break;
        case Journal::Entry::kEndStep:
          s = (*writer)->EndStep(entry.step);
          break;
        case Journal::Entry::kClose:
          s = (*writer)->Close(entry.end_of_training);
          closed = true;
          break;
        default:
          break;
      }
      entry = Journal::Entry();
    }
    if (s.ok() && !closed) s = (*writer)->Close(false);
  }
  if (s.ok()) {
    spdlog::info("leftover journal {}: pushed ({} entries durable on {}); deleted", path,
                 journal->entries(), header.target);
    journal->Remove();
    return true;
  }
  if (Retryable(s)) {
    spdlog::error("leftover journal {}: {}; kept for the next agent", path,
                  std::string(s.message()));
    return false;
  }
  spdlog::error("leftover journal {}: the collector refused it: {}; renamed to {}.failed", path,
                std::string(s.message()), path);
  std::rename(path.c_str(), absl::StrCat(path, ".failed").c_str());
  return true;
}

}  // namespace agent
}  // namespace tensorkeep
