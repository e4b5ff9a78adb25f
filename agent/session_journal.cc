// Session: the journal: what the writer cannot take within max_stall_seconds
// is spilled to local disk, drained back to the writer in order, and kept for
// the next agent when the writer fails or the agent stops.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/deadline.h"
#include "agent/session.h"
#include "base/errors.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace agent {
namespace {

// How long one offer of journaled entries to the writer may last while the
// client is quiet.
constexpr auto kDrainSlice = std::chrono::milliseconds(20);
// A dropped record is logged at once, then at most this often.
constexpr auto kDropLogInterval = std::chrono::seconds(10);

using Clock = std::chrono::steady_clock;

// trial/worker names made safe for a file name (and short).
std::string FileSafe(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 60)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    out.push_back(ok ? c : '_');
  }
  return out;
}

}  // namespace

void Session::Put(Journal::Entry entry) {
  if (journal_ == nullptr) {
    const auto deadline = DeadlineAfter(max_stall_seconds_);
    if (WriterReady(deadline)) {
      const absl::Status s = entry.kind == Journal::Entry::kRecord
                                 ? writer_->TryWrite(&entry.record, deadline)
                                 : writer_->TryEndStep(entry.step, deadline);
      if (s.ok()) return;
      if (!absl::IsDeadlineExceeded(s)) {
        SetError(s);
        return;
      }
    } else if (!error_.ok()) {
      return;
    }
  }
  Spill(std::move(entry));
}

void Session::Spill(Journal::Entry entry) {
  if (journal_ == nullptr) {
    if (journal_settings_ == nullptr || journal_settings_->space == nullptr) {
      Drop(entry, absl::FailedPreconditionError("this agent has no journal"));
      return;
    }
    const std::string name = NextJournalName();
    auto journal =
        Journal::Create(journal_settings_->dir, name, JournalHeader(), journal_settings_->space);
    if (!journal.ok()) {
      Drop(entry, journal.status());
      return;
    }
    journal_ = std::move(*journal);
    journal_name_ = name;
    drain_ticket_ = 0;
    spdlog::warn(
        "{}: the collector took nothing for {} s (max_stall_seconds; it is unreachable or "
        "slower than training): journaling to {} so that training goes on; replayed in order "
        "once the collector takes data again",
        Name(), max_stall_seconds_, journal_->path());
  }
  const uint64_t before = journal_->size();
  const absl::Status s = journal_->Append(entry);
  if (!s.ok()) {
    Drop(entry, s);
    return;
  }
  journaled_bytes_ += journal_->size() - before;
  if (entry.kind == Journal::Entry::kEndStep) {
    // The end of a step: what the step handed over is on disk.
    const absl::Status synced = journal_->Sync();
    if (!synced.ok()) spdlog::error("{}: {}", Name(), std::string(synced.message()));
  }
}

void Session::Drop(const Journal::Entry& entry, const absl::Status& why) {
  if (entry.kind != Journal::Entry::kRecord) return;  // a later end of step covers it
  ++dropped_records_;
  const auto now = Clock::now();
  if (dropped_records_ == 1 || now - last_drop_log_ >= kDropLogInterval) {
    last_drop_log_ = now;
    spdlog::error(
        "{}: DROPPED tensor {} of step {} ({} dropped so far): the writer could not take it "
        "within max_stall_seconds ({} s) and the journal could not either: {}",
        Name(), QuoteInput(entry.record.name()), entry.record.step(), dropped_records_,
        max_stall_seconds_, std::string(why.message()));
  }
}

void Session::Drain(bool blocking, Clock::time_point until) {
  if (journal_ == nullptr || !error_.ok()) return;
  const auto start = Clock::now();
  // Not blocking: room now or not at all.
  const auto deadline = blocking ? until : start;
  if (!WriterReady(deadline)) return;
  for (;;) {
    if (!drain_entry_.has_value()) {
      if (journal_->AllRead()) break;
      Journal::Entry entry;
      const absl::StatusOr<bool> read = journal_->Read(&entry);
      if (!read.ok()) {
        SetError(KeepJournal(read.status()));
        return;
      }
      drain_entry_ = std::move(entry);
    }
    absl::Status s;
    if (drain_entry_->kind == Journal::Entry::kRecord) {
      s = writer_->TryWrite(&drain_entry_->record, deadline);
    } else if (drain_entry_->kind == Journal::Entry::kEndStep) {
      s = writer_->TryEndStep(drain_entry_->step, deadline);
    }                                         // kClose: the Close being handled does it
    if (absl::IsDeadlineExceeded(s)) return;  // no room yet
    if (!s.ok()) {
      SetError(KeepJournal(s));
      return;
    }
    drain_entry_.reset();
    drain_ticket_ = 0;
    if (!blocking && Clock::now() - start >= kDrainSlice) return;
  }
  // All of it was taken: it goes once durable.
  if (drain_ticket_ == 0) {
    const absl::StatusOr<uint64_t> ticket = writer_->RequestFlush();
    if (!ticket.ok()) {
      SetError(KeepJournal(ticket.status()));
      return;
    }
    drain_ticket_ = *ticket;
  }
  if (blocking) {
    const absl::Status s = writer_->WaitFlushed(drain_ticket_, deadline);
    if (absl::IsDeadlineExceeded(s)) return;
    if (!s.ok()) {
      SetError(KeepJournal(s));
      return;
    }
  } else if (!writer_->Flushed(drain_ticket_)) {
    return;
  }
  spdlog::info(
      "{}: journal {} replayed ({} entries durable on the collector); pushing directly again",
      Name(), journal_->path(), journal_->entries());
  journal_->Remove();
  journal_.reset();
  drain_ticket_ = 0;
}

absl::Status Session::KeepJournal(const absl::Status& status) {
  if (journal_ == nullptr) return status;
  (void)journal_->Sync();
  const std::string path = journal_->path();
  journal_.reset();  // the file stays
  drain_entry_.reset();
  spdlog::error("{}: {}; journal {} is kept on disk and pushed when tensorkeep-agent next starts",
                Name(), std::string(status.message()), path);
  const std::string message =
      absl::StrCat(status.message(),
                   "; what was journaled (the collector being unreachable) is "
                   "kept in ",
                   path, " and pushed when tensorkeep-agent next starts");
  const Reason reason = GetReason(status);
  return reason != Reason::kNone ? MakeError(reason, message)
                                 : absl::Status(status.code(), message);
}

void Session::JournalHeld() {
  std::vector<client::UnsavedItem> items;
  if (writer_ != nullptr) items = writer_->Abandon();
  writer_.reset();
  const bool journaled_close = journal_ != nullptr;  // the journal holds the close, if any
  std::string kept;
  if (journal_ != nullptr) {
    (void)journal_->Sync();
    kept = journal_->path();
  }
  size_t count = 0;
  for (const auto& item : items)
    count += !(item.kind == client::UnsavedItem::kClose && journaled_close);
  if (count > 0 && Journaling()) {
    // Replayed before the journal (names sort so): the writer's items are
    // older than what waits in the journal.
    const std::string name =
        journal_ != nullptr ? absl::StrCat(journal_name_, "-a") : NextJournalName();
    auto journal =
        Journal::Create(journal_settings_->dir, name, JournalHeader(), journal_settings_->space);
    absl::Status s = journal.status();
    for (auto& item : items) {
      if (!s.ok()) break;
      Journal::Entry entry;
      if (item.kind == client::UnsavedItem::kRecord) {
        entry.record = std::move(item.record);
      } else if (item.kind == client::UnsavedItem::kEndStep) {
        entry.kind = Journal::Entry::kEndStep;
        entry.step = item.step;
      } else if (!journaled_close) {
        entry.kind = Journal::Entry::kClose;
        entry.end_of_training = item.end_of_training;
      } else {
        continue;
      }
      s = (*journal)->Append(entry);
    }
    if (s.ok()) s = (*journal)->Sync();
    if (s.ok()) {
      spdlog::warn(
          "{}: the agent stops with {} entries not yet durable: journaled to {}{}; pushed "
          "when tensorkeep-agent next starts",
          Name(), count, (*journal)->path(),
          kept.empty() ? "" : absl::StrCat(", before journal ", kept));
    } else {
      spdlog::error(
          "{}: the agent stops, and {} entries not yet durable could not be journaled: "
          "{}; LOST",
          Name(), count, std::string(s.message()));
    }
  } else if (count > 0) {
    spdlog::error("{}: the agent stops, and {} entries not yet durable are LOST (no journal)",
                  Name(), count);
  }
  if (!kept.empty()) {
    spdlog::warn("{}: journal {} is kept and pushed when tensorkeep-agent next starts", Name(),
                 kept);
    journal_.reset();
    drain_entry_.reset();
  }
}

Journal::Header Session::JournalHeader() const {
  return Journal::Header{options_.server, options_.trial, options_.worker, options_.num_workers,
                         options_.attempt};
}

std::string Session::NextJournalName() {
  // Zero-padded: names of one session sort in the order they were made.
  return absl::StrCat(FileSafe(options_.trial), ".", FileSafe(options_.worker), ".",
                      absl::StrFormat("%07d-%06d-%06d", getpid(), id_, ++journals_));
}

}  // namespace agent
}  // namespace tensorkeep
