// Session: the writer's life: opened in the background, waits for what was
// handed over to be durable, and an orphan pushing on after its training
// process is gone.
#include <future>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/deadline.h"
#include "agent/session.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace agent {
namespace {

// An orphan checks this often whether the agent stops.
constexpr double kOrphanSliceSeconds = 0.5;

using Clock = std::chrono::steady_clock;

}  // namespace

bool Session::Journaling() const {
  return journal_settings_ != nullptr && journal_settings_->space != nullptr;
}

void Session::EnsureWriter() {
  if (writer_tried_) return;
  writer_tried_ = true;
  // In the background: finding a cluster's owner asks collectors, which may
  // be down; the writer then connects on its own thread.
  opening_ = std::async(std::launch::async,
                        [options = options_] { return client::Writer::OpenInBackground(options); });
}

bool Session::WriterReady(Clock::time_point deadline) {
  if (writer_ != nullptr) return true;
  if (!opening_.valid()) return false;
  if (deadline == Clock::time_point::max()) {
    opening_.wait();
  } else if (opening_.wait_until(deadline) != std::future_status::ready) {
    return false;
  }
  auto writer = opening_.get();
  if (!writer.ok()) {
    SetError(KeepJournal(writer.status()));
    return false;
  }
  writer_ = std::move(*writer);
  return true;
}

absl::Status Session::WaitDurable(Clock::time_point deadline, const bool* end_of_training) {
  if (!error_.ok()) return error_;
  if (!WriterReady(deadline)) {
    return error_.ok() ? absl::DeadlineExceededError("the writer is not open yet") : error_;
  }
  Drain(true, deadline);
  if (!error_.ok()) return error_;
  if (journal_ != nullptr) return absl::DeadlineExceededError("the journal is not durable yet");
  absl::Status s;
  if (end_of_training == nullptr) {
    const absl::StatusOr<uint64_t> ticket = writer_->RequestFlush();
    s = ticket.ok() ? writer_->WaitFlushed(*ticket, deadline) : ticket.status();
  } else {
    s = writer_->CloseUntil(*end_of_training, deadline);
  }
  if (absl::IsDeadlineExceeded(s)) return s;
  if (!s.ok()) SetError(s);
  return error_;
}

absl::Status Session::NotYetDurable(absl::string_view what) const {
  std::string held = writer_ != nullptr ? writer_->Unsaved() : "";
  if (journal_ != nullptr) {
    absl::StrAppend(&held, held.empty() ? "" : ", and ", "what waits in the journal ",
                    journal_->path());
  }
  return absl::UnavailableError(absl::StrCat(
      "the ", what, " waited ", client_retry_timeout_, " s (retry_timeout) for the collector at ",
      options_.server, ": not yet durable: ", held.empty() ? "nothing" : held,
      "; tensorkeep-agent keeps it and pushes it once the collector takes data again"));
}

void Session::Orphan(bool end_of_training) {
  if (orphans_ != nullptr) orphans_->fetch_add(1);
  for (bool waited = false;; waited = true) {
    const absl::Status s = WaitDurable(DeadlineAfter(kOrphanSliceSeconds), &end_of_training);
    PublishState();
    if (s.ok()) {
      if (waited) {
        spdlog::info("{}: everything its training process handed over is durable; closed", Name());
      }
      break;
    }
    if (!absl::IsDeadlineExceeded(s)) {
      spdlog::error("{}: {}", Name(), std::string(s.message()));
      break;
    }
    if (!waited) {
      spdlog::warn(
          "{}: its training process is gone with data not yet durable on the collector; "
          "pushing on while the agent runs",
          Name());
    }
    if (stopping_ != nullptr && stopping_->load()) {
      JournalHeld();
      break;
    }
  }
  writer_.reset();
  reservation_.Release();
  if (orphans_ != nullptr) orphans_->fetch_sub(1);
}

}  // namespace agent
}  // namespace tensorkeep
