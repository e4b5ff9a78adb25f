#include "server/write_session.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/stored_record.h"
#include "server/validation.h"
#include "server/worker_attempts.h"
#include "storage/keys.h"
#include "storage/record_block.h"
#include "storage/value_log.h"
#include "tensor/dtype.h"
#include "tensor/reductions.h"

namespace tensorkeep {
namespace {

absl::Status Bad(absl::string_view message) { return MakeError(Reason::kBadRequest, message); }

}  // namespace

WriteSession::WriteSession(Collector* collector)
    : collector_(collector), stream_(std::make_shared<WriteStream>()) {}

WriteSession::~WriteSession() { ReleaseWriter(); }

void WriteSession::ReleaseWriter() {
  if (claim_ != 0) collector_->ReleaseWriter(trial_->name(), worker_, claim_);
}

PendingWrite WriteSession::NewWrite() const {
  PendingWrite w;
  w.trial = trial_;
  w.update.worker = worker_;
  w.update.attempt = attempt_;
  w.stream = stream_;
  return w;
}

absl::StatusOr<WriteSession::Outcome> WriteSession::Handle(v1::PushRequest& request) {
  if (closed_) return Bad("message after Close on the same stream");
  if (request.seq() <= last_seq_) {
    return Bad(absl::StrCat("message seq ", request.seq(), " does not increase (last was ",
                            last_seq_, ")"));
  }
  last_seq_ = request.seq();
  absl::StatusOr<Outcome> out = HandleKind(request);
  if (out.ok() && out->first_seq == 0) out->first_seq = request.seq();
  return out;
}

absl::StatusOr<WriteSession::Outcome> WriteSession::HandleKind(v1::PushRequest& request) {
  if (trial_ == nullptr && request.kind_case() != v1::PushRequest::kOpen) {
    return Bad("the first message of a Push stream must be Open{trial, worker, num_workers}");
  }
  if (partial_.has_value() && request.kind_case() != v1::PushRequest::kChunk) {
    return Bad(
        "a chunked tensor was interrupted: Chunk messages must follow its record until "
        "value_size bytes have arrived");
  }
  switch (request.kind_case()) {
    case v1::PushRequest::kOpen:
      return HandleOpen(request.open());
    case v1::PushRequest::kRecords:
      return HandleRecords(*request.mutable_records());
    case v1::PushRequest::kChunk: {
      if (!partial_.has_value()) return Bad("Chunk without a record waiting for data");
      v1::TensorRecord* last = partial_->mutable_records(partial_->records_size() - 1);
      if (last->data().size() + request.chunk().data().size() > last->value_size()) {
        return Bad(absl::StrCat("chunks of tensor '", last->name(), "' exceed its value_size ",
                                last->value_size()));
      }
      last->mutable_data()->append(request.chunk().data());
      if (last->data().size() < last->value_size()) return Outcome{};
      v1::RecordBatch batch = std::move(*partial_);
      partial_.reset();
      const uint64_t first = partial_from_;
      partial_from_ = 0;
      auto out = HandleRecords(batch);
      partial_memory_.Release();  // the write's batch holds its own share now
      if (out.ok()) out->first_seq = first;
      return out;
    }
    case v1::PushRequest::kEndStep: {
      TK_RETURN_IF_ERROR(ValidateStep(request.end_step().step(), "end-of-step"));
      Outcome out;
      const int64_t step = static_cast<int64_t>(request.end_step().step());
      if (step > committed_) {
        committed_ = step;
        current_step_ = std::max(current_step_, step);
        out.write = NewWrite();
        out.write->update.committed_through = committed_;
      }
      return out;
    }
    case v1::PushRequest::kFlush: {
      Outcome out;
      out.wants_ack = true;
      return out;
    }
    case v1::PushRequest::kClose: {
      closed_ = true;
      Outcome out;
      out.wants_ack = true;
      out.closes = true;
      out.write = NewWrite();
      // The trial ends once every expected worker finished (StepTracker).
      out.write->update.finished = request.close().end_of_training();
      if (current_step_ > committed_) {
        committed_ = current_step_;
        out.write->update.committed_through = committed_;
      }
      return out;
    }
    case v1::PushRequest::KIND_NOT_SET:
      break;
  }
  return Bad("empty Push message (no Open, records, chunk, end_step, flush or close)");
}

absl::StatusOr<WriteSession::Outcome> WriteSession::HandleOpen(const v1::Open& open) {
  if (trial_ != nullptr) return Bad("Open sent twice on one stream");
  TK_RETURN_IF_ERROR(ValidateTrialName(open.trial()));
  TK_RETURN_IF_ERROR(ValidateWorkerName(open.worker()));
  if (open.num_workers() < 1 || open.num_workers() > kMaxWorkers) {
    return Bad(absl::StrCat("num_workers must be between 1 and ", kMaxWorkers, ", got ",
                            open.num_workers()));
  }
  if (open.attempt() > kMaxAttempt) {
    return Bad(absl::StrCat("attempt must be at most ", kMaxAttempt, ", got ", open.attempt()));
  }
  auto existing = collector_->GetTrial(open.trial());
  // A restart of the job (server/worker_attempts.h): a higher attempt than the
  // worker's; a lower one was superseded.
  bool restart = false;
  if (existing.ok()) {
    if (std::optional<uint32_t> current = (*existing)->AttemptOf(open.worker())) {
      if (open.attempt() < *current) {
        return MakeError(Reason::kConflict, SupersededMessage(open.trial(), open.worker(),
                                                              open.attempt(), *current));
      }
      restart = open.attempt() > *current;
    }
  }
  if (restart && (*existing)->ended()) {
    return MakeError(Reason::kConflict,
                     RestartAfterEndMessage(open.trial(), open.worker(), open.attempt()));
  }
  if (!open.resume() && existing.ok() && (*existing)->ended()) {
    // A script run twice into one trial: say so before it trains, not at its
    // first rewritten step (smdebug refuses an existing out_dir at once).
    return MakeError(
        Reason::kConflict,
        absl::StrCat("trial '", open.trial(),
                     "' has ended (its workers closed with end of training or were "
                     "lost, or it was ended): a new run cannot write into it; give this run a new "
                     "trial name, or delete the old trial first"));
  }
  TK_ASSIGN_OR_RETURN(auto trial, collector_->GetOrCreateTrial(open.trial(), open.unpublished()));
  // A restarted worker's writer may come before the collector saw the failed
  // attempt's stream end: it retries (UNAVAILABLE) as a reconnecting one does.
  TK_ASSIGN_OR_RETURN(const uint64_t claim, collector_->ClaimWriter(open.trial(), open.worker(),
                                                                    open.resume() || restart));
  trial_ = std::move(trial);
  worker_ = open.worker();
  claim_ = claim;
  num_workers_ = open.num_workers();
  attempt_ = open.attempt();
  // A new attempt commits again from nothing (its Open, applied before any of
  // its records, resets the worker's committed step).
  committed_ = restart ? StepTracker::kNone : trial_->CommittedThrough(worker_);
  current_step_ = committed_;
  Outcome out;
  out.write = NewWrite();
  out.write->update.num_workers = num_workers_;
  out.write->update.change = WorkerChange::kOpened;  // a LOST worker is back
  out.write->update.restart_unix = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  return out;
}

absl::Status WriteSession::ValidateRecord(const v1::TensorRecord& r, bool complete) const {
  TK_RETURN_IF_ERROR(ValidateTensorName(r.name()));
  // (The messages are built only on failure: this runs for every record.)
  if (!ValidateStep(r.step(), "").ok()) {
    return ValidateStep(r.step(), absl::StrCat("step of tensor '", r.name(), "'"));
  }
  if (!ValidateStep(r.mode_step(), "").ok()) {
    return ValidateStep(r.mode_step(), absl::StrCat("mode step of tensor '", r.name(), "'"));
  }
  TK_RETURN_IF_ERROR(ValidateMode(r.mode(), /*allow_unspecified=*/false));
  for (const auto& c : r.collections()) TK_RETURN_IF_ERROR(ValidateCollectionName(c));
  for (const auto& red : r.reductions()) {
    auto kind = ParseReduction(red.name());
    if (!kind.ok()) {
      return Bad(absl::StrCat("tensor '", r.name(), "': ", kind.status().message()));
    }
  }
  if (!r.has_value()) {
    if (!r.data().empty() || r.value_size() != 0) {
      return Bad(absl::StrCat("tensor '", r.name(), "' has data but has_value is false"));
    }
    if (r.reductions().empty()) {
      return Bad(absl::StrCat("tensor '", r.name(), "' has neither a value nor reductions"));
    }
    return absl::OkStatus();
  }
  if (!IsValidDType(r.dtype())) {
    return Bad(absl::StrCat("tensor '", r.name(), "' has unknown dtype ", r.dtype(),
                            ": use float16, float32, float64, int8, int16, int32, int64, uint8, "
                            "bool or bfloat16"));
  }
  if (static_cast<size_t>(r.shape_size()) > kMaxRank) {
    return Bad(absl::StrCat("tensor '", r.name(), "' has rank ", r.shape_size(), "; the limit is ",
                            kMaxRank));
  }
  if (r.value_size() > collector_->options().max_value_bytes) {
    return Bad(absl::StrCat("tensor '", r.name(), "' is ", r.value_size(),
                            " bytes; this collector accepts at most ",
                            collector_->options().max_value_bytes));
  }
  auto size_ok =
      CheckValueSize(static_cast<DType>(r.dtype()),
                     absl::Span<const int64_t>(r.shape().data(), r.shape_size()), r.value_size());
  if (!size_ok.ok()) {
    return Bad(absl::StrCat("tensor '", r.name(), "' at step ", r.step(), ": ", size_ok.message()));
  }
  if (complete && r.data().size() != r.value_size()) {
    return Bad(absl::StrCat("tensor '", r.name(), "' carries ", r.data().size(),
                            " bytes but declares value_size ", r.value_size()));
  }
  if (!complete && r.data().size() >= r.value_size()) {
    return Bad(absl::StrCat("tensor '", r.name(), "' carries more bytes than its value_size"));
  }
  return absl::OkStatus();
}

absl::Status WriteSession::CheckCommitted(v1::TensorRecord& r, int64_t committed,
                                          bool* skip) const {
  *skip = false;
  const auto conflict = [&](absl::string_view why) {
    // `committed` is what this worker has passed, this message included; after
    // end of training that is every step (no number to show).
    const std::string through =
        committed == StepTracker::kAll
            ? std::string("it closed this trial with end of training")
            : absl::StrCat("it has committed every step through ", committed);
    return MakeError(
        Reason::kConflict,
        absl::StrCat("worker '", worker_, "' of trial '", trial_->name(), "' writes step ",
                     r.step(), " again (", through, "); tensor '", r.name(), "' ", why,
                     ": a worker cannot go back to a step it committed. If this is a new run of "
                     "the script, give it a new trial name"));
  };
  TK_ASSIGN_OR_RETURN(auto stored, collector_->FindRecord(*trial_, r.step(), worker_, r.name()));
  if (!stored.has_value()) return conflict("was not saved at that step");
  v1::TensorRecord& meta = stored->meta;
  if (EncodeRecordMeta(meta) != EncodeRecordMeta(r)) {
    return conflict("differs from what is stored");
  }
  if (r.has_value()) {
    // This runs in a reaction: a large value is compared by the checksum its
    // index entry keeps (no pread of up to a gigabyte here); a value without
    // one (small, inline) is at hand.
    if (!stored->data_loaded) {
      TK_ASSIGN_OR_RETURN(auto reader, collector_->OpenValue(*trial_, *stored));
      if (auto crc = reader->checksum()) {
        if (*crc != ValueChecksum(r.data())) return conflict("differs from what is stored");
        *skip = true;  // an identical resend: nothing to do
        return absl::OkStatus();
      }
    }
    TK_RETURN_IF_ERROR(collector_->LoadValue(*trial_, &*stored));
    if (stored->data != r.data()) return conflict("differs from what is stored");
  }
  *skip = true;  // an identical resend: nothing to do
  return absl::OkStatus();
}

PendingWrite WriteSession::Encode(google::protobuf::RepeatedPtrField<v1::TensorRecord>& records,
                                  const std::vector<int>& order,
                                  const std::vector<bool>& skip) const {
  const int n = records.size();
  PendingWrite w = NewWrite();
  w.batch = collector_->store()->NewBatch();
  w.update.records.reserve(n);
  RecordBlockBuilder block;
  BlockRef ref;
  // Records whose values go beside their blocks: those of the block being
  // built, then with the id of their block.
  std::vector<int> block_large;
  std::vector<std::pair<int, uint64_t>> large;
  const auto flush = [&]() {
    if (block.count() == 0) return;
    ref.id = collector_->NewBlockId();
    w.batch->Put(BlockKey(trial_->name(), ref.step, worker_, ref.id), block.Finish());
    for (int i : block_large) large.emplace_back(i, ref.id);
    block_large.clear();
    w.update.blocks.push_back(std::move(ref));
    ref = BlockRef{};
  };
  for (int k = 0; k < n; ++k) {
    const int i = order[k];
    if (skip[i]) continue;
    v1::TensorRecord& r = records[i];
    if (block.count() > 0 && (r.step() != ref.step || block.size_bytes() >= kBlockTargetBytes)) {
      flush();
    }
    if (block.count() == 0) {
      ref.step = r.step();
      ref.first_name = r.name();
    }
    ref.last_name = r.name();
    const bool inline_value = StoresInline(r);
    if (!inline_value) {
      block_large.push_back(i);
    }
    block.Add(r.name(), EncodeRecordMeta(r), inline_value ? std::string_view(r.data()) : "");
    IndexedRecord rec;
    rec.name = inline_value ? std::move(*r.mutable_name()) : r.name();
    rec.step = r.step();
    rec.mode = r.mode();
    rec.mode_step = r.mode_step();
    rec.collections.assign(std::make_move_iterator(r.mutable_collections()->begin()),
                           std::make_move_iterator(r.mutable_collections()->end()));
    w.update.records.push_back(std::move(rec));
  }
  flush();
  // Large values once their blocks have ids, each handed to the batch as it
  // is (the message's bytes are not needed after this): written from there,
  // not copied first into one buffer (~16 % of the collector's CPU for a
  // stream of 800 KB values, issue 16).
  for (const auto& [i, block_id] : large) {
    v1::TensorRecord& r = records[i];
    w.batch->PutOwned(ValueKey(trial_->name(), r.step(), worker_, block_id, r.name()),
                      std::move(*r.mutable_data()));
  }
  return w;
}

absl::StatusOr<WriteSession::Outcome> WriteSession::HandleRecords(v1::RecordBatch& batch) {
  const int n = batch.records_size();
  if (n == 0) return Outcome{};
  auto& records = *batch.mutable_records();
  // value_size 0 with data: the whole value is in this message.
  for (auto& r : records) {
    if (r.has_value() && r.value_size() == 0) r.set_value_size(r.data().size());
  }
  // A last record whose bytes are still to come waits for its chunks.
  const v1::TensorRecord& last = batch.records(n - 1);
  const bool waiting = last.has_value() && last.data().size() < last.value_size();
  for (int i = 0; i < n; ++i) {
    TK_RETURN_IF_ERROR(ValidateRecord(batch.records(i), !(waiting && i == n - 1)));
  }
  if (waiting) {
    TK_ASSIGN_OR_RETURN(partial_memory_,
                        collector_->memory()->Reserve(last.value_size(),
                                                      absl::StrCat("tensor '", last.name(), "'")));
    partial_ = std::move(batch);
    partial_from_ = last_seq_;
    // Room for the whole value at once: appending chunks to a string grown
    // by doubling would hold up to twice the value.
    v1::TensorRecord* record = partial_->mutable_records(n - 1);
    record->mutable_data()->reserve(record->value_size());
    return Outcome{};
  }

  // Check the whole message against committed steps and step modes before
  // encoding anything, so that a bad message leaves no trace. (Whether a
  // step's mode agrees with what other writers stored is the Committer's to
  // check: it owns that state.)
  //
  // Which records rewrite a committed step depends on the message order (a
  // record of a higher step commits the steps before it).
  int64_t current = current_step_;
  int64_t committed = committed_;
  std::vector<bool> skip(n, false);
  std::vector<int> old;  // records of steps committed when they arrive
  for (int i = 0; i < n; ++i) {
    const int64_t step = static_cast<int64_t>(records[i].step());
    if (step <= committed) {
      old.push_back(i);
    } else if (step > current) {
      if (current >= 0) committed = std::max(committed, step - 1);
      current = step;
    }
  }
  // The records sorted by (step, name): duplicates are neighbours, each step
  // is a run (one mode check and one block group per step).
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const auto& ra = records[a];
    const auto& rb = records[b];
    if (ra.step() != rb.step()) return ra.step() < rb.step();
    return ra.name() < rb.name();
  });
  for (int k = 0; k < n;) {
    const v1::TensorRecord& first = records[order[k]];
    const StepInfo info{first.mode(), first.mode_step()};
    const auto mismatch = [&](const StepInfo& other, const v1::TensorRecord& r) {
      return MakeError(
          Reason::kConflict,
          absl::StrCat("step ", r.step(), " of trial '", trial_->name(), "' is ",
                       ModeName(other.mode), " step ", other.mode_step, "; tensor '", r.name(),
                       "' says ", ModeName(r.mode()), " step ", r.mode_step()));
    };
    int end = k + 1;
    for (; end < n && records[order[end]].step() == first.step(); ++end) {
      const v1::TensorRecord& r = records[order[end]];
      if (r.name() == records[order[end - 1]].name()) {
        return Bad(absl::StrCat("tensor '", r.name(), "' appears twice for step ", r.step(),
                                " in one message"));
      }
      if (r.mode() != info.mode || r.mode_step() != info.mode_step) return mismatch(info, r);
    }
    k = end;
  }
  for (int i : old) {
    bool s = false;
    TK_RETURN_IF_ERROR(CheckCommitted(records[i], committed, &s));
    skip[i] = s;
  }

  Outcome out;
  out.write = Encode(records, order, skip);
  PendingWrite& w = *out.write;
  if (committed > committed_) w.update.committed_through = committed;
  current_step_ = current;
  committed_ = committed;
  return out;
}

}  // namespace tensorkeep
