#include "agent/journal_replay.h"

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/deadline.h"
#include "client/writer.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace agent {
namespace {

// Errors worth trying again later (a limit of the collector's, or the
// collector away), as opposed to a refusal of the data itself.
bool Retryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) ||
         absl::IsUnknown(s) || absl::IsInternal(s) || absl::IsResourceExhausted(s);
}

// A replay checks this often whether the agent stops.
constexpr double kStopCheckSeconds = 0.5;

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

bool ReplayJournal(const std::string& path, JournalSpace* space, const ReplayOptions& replay) {
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
  options.linger_seconds = replay.linger_seconds;
  // The collector may be away for longer than any give-up time: the replay
  // waits for it while the agent runs (it connects and reconnects on the
  // writer's thread).
  options.retry_timeout_seconds = std::numeric_limits<double>::infinity();
  // Each wait is cut in slices, so that a stopping agent does not wait for a
  // collector that is away, and a long one releases the agent.
  const auto stop_requested = [&replay] {
    return replay.stopping != nullptr && replay.stopping->load();
  };
  bool released = false;
  const auto in_slices = [&](const auto& attempt) -> absl::Status {
    const auto release_at = DeadlineAfter(replay.hold_seconds);
    for (;;) {
      absl::Status s = attempt(DeadlineAfter(kStopCheckSeconds));
      if (!absl::IsDeadlineExceeded(s)) return s;
      if (stop_requested()) return absl::CancelledError("the agent stops");
      if (!released && std::chrono::steady_clock::now() >= release_at) {
        released = true;
        spdlog::warn(
            "leftover journal {}: its collector {} has not taken data for {} s; waiting on for "
            "it while the agent runs",
            path, header.target, replay.hold_seconds);
        if (replay.on_released) replay.on_released();
      }
    }
  };
  absl::Status s;
  auto writer = client::Writer::OpenInBackground(options);
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
          // Checked as Write() checks it (a damaged entry is refused here).
          s = client::Writer::Validate(&entry.record);
          if (s.ok()) {
            s = in_slices(
                [&](auto deadline) { return (*writer)->TryWrite(&entry.record, deadline); });
          }
          break;
        case Journal::Entry::kEndStep:
          s = in_slices([&](auto deadline) { return (*writer)->TryEndStep(entry.step, deadline); });
          break;
        case Journal::Entry::kClose:
          s = in_slices([&](auto deadline) {
            return (*writer)->CloseUntil(entry.end_of_training, deadline);
          });
          closed = true;
          break;
        default:
          break;
      }
      entry = Journal::Entry();
    }
    if (s.ok() && !closed) {
      s = in_slices([&](auto deadline) { return (*writer)->CloseUntil(false, deadline); });
    }
    if (absl::IsCancelled(s)) {
      (void)(*writer)->Abandon();  // the file keeps all of it; the writer does not linger
      spdlog::warn(
          "leftover journal {}: the agent stops before it is pushed; kept for the next "
          "agent",
          path);
      return false;
    }
  }
  if (s.ok()) {
    spdlog::info("leftover journal {}: pushed ({} entries durable on {}); deleted", path,
                 journal->entries(), header.target);
    journal->Remove();
    return true;
  }
  if (Retryable(s)) {
    spdlog::error("leftover journal {}: {}; kept, to be tried again", path,
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
