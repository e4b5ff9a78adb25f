#include "server/write_session.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/validation.h"
#include "storage/keys.h"
#include "tensor/dtype.h"
#include "tensor/reductions.h"

namespace tensorkeep {
namespace {

absl::Status Bad(absl::string_view message) { return MakeError(Reason::kBadRequest, message); }

// The record's metadata as stored in the tensor index: everything but data.
v1::TensorRecord IndexEntry(const v1::TensorRecord& record) {
  v1::TensorRecord meta;
  meta.set_name(record.name());
  meta.set_step(record.step());
  meta.set_mode(record.mode());
  meta.set_mode_step(record.mode_step());
  meta.set_dtype(record.dtype());
  *meta.mutable_shape() = record.shape();
  meta.set_value_size(record.has_value() ? record.value_size() : 0);
  meta.set_has_value(record.has_value());
  *meta.mutable_reductions() = record.reductions();
  *meta.mutable_collections() = record.collections();
  return meta;
}

}  // namespace

PendingWrite WriteSession::NewWrite() const {
  PendingWrite w;
  w.trial = trial_;
  w.update.worker = worker_;
  return w;
}

absl::StatusOr<WriteSession::Outcome> WriteSession::Handle(v1::PushRequest& request) {
  if (closed_) return Bad("message after Close on the same stream");
  if (request.seq() <= last_seq_) {
    return Bad(absl::StrCat("message seq ", request.seq(), " does not increase (last was ",
                            last_seq_, ")"));
  }
  last_seq_ = request.seq();
  if (trial_ == nullptr && request.kind_case() != v1::PushRequest::kOpen) {
    return Bad("the first message of a Push stream must be Open{trial, worker, num_workers}");
  }
  if (partial_.has_value() && request.kind_case() != v1::PushRequest::kChunk) {
    return Bad("a chunked tensor was interrupted: Chunk messages must follow its record until "
               "value_size bytes have arrived");
  }
  switch (request.kind_case()) {
    case v1::PushRequest::kOpen:
      return HandleOpen(request.open());
    case v1::PushRequest::kRecords:
      return HandleRecords(*request.mutable_records());
    case v1::PushRequest::kChunk: {
      if (!partial_.has_value()) return Bad("Chunk without a record waiting for data");
      v1::TensorRecord* last =
          partial_->mutable_records(partial_->records_size() - 1);
      if (last->data().size() + request.chunk().data().size() > last->value_size()) {
        return Bad(absl::StrCat("chunks of tensor '", last->name(), "' exceed its value_size ",
                                last->value_size()));
      }
      last->mutable_data()->append(request.chunk().data());
      if (last->data().size() < last->value_size()) return Outcome{};
      v1::RecordBatch batch = std::move(*partial_);
      partial_.reset();
      return HandleRecords(batch);
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
  trial_ = collector_->GetOrCreateTrial(open.trial());
  worker_ = open.worker();
  num_workers_ = open.num_workers();
  committed_ = trial_->CommittedThrough(worker_);
  current_step_ = committed_;
  Outcome out;
  out.write = NewWrite();
  out.write->update.num_workers = num_workers_;
  return out;
}

absl::Status WriteSession::ValidateRecord(const v1::TensorRecord& r, bool complete) const {
  TK_RETURN_IF_ERROR(ValidateTensorName(r.name()));
  TK_RETURN_IF_ERROR(ValidateStep(r.step(), absl::StrCat("step of tensor '", r.name(), "'")));
  TK_RETURN_IF_ERROR(ValidateStep(r.mode_step(), absl::StrCat("mode step of tensor '", r.name(), "'")));
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
                            ": use float16, float32, float64, int8, int16, int32, int64, uint8 "
                            "or bool"));
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
  auto size_ok = CheckValueSize(static_cast<DType>(r.dtype()),
                                absl::Span<const int64_t>(r.shape().data(), r.shape_size()),
                                r.value_size());
  if (!size_ok.ok()) {
    return Bad(absl::StrCat("tensor '", r.name(), "' at step ", r.step(), ": ",
                            size_ok.message()));
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

absl::Status WriteSession::CheckCommitted(const v1::TensorRecord& r, bool* skip) const {
  *skip = false;
  const auto conflict = [&](absl::string_view why) {
    return MakeError(Reason::kConflict,
                     absl::StrCat("worker '", worker_, "' already committed step ", r.step(),
                                  " of trial '", trial_->name(), "' (through step ", committed_,
                                  "); tensor '", r.name(), "' ", why,
                                  ": a worker may not go back to a step it committed"));
  };
  TensorStore* store = collector_->store();
  TK_ASSIGN_OR_RETURN(auto meta, store->Get(TensorKey(trial_->name(), r.name(), r.step(), worker_)));
  if (!meta.has_value()) return conflict("was not saved at that step");
  if (*meta != IndexEntry(r).SerializeAsString()) return conflict("differs from what is stored");
  if (r.has_value()) {
    TK_ASSIGN_OR_RETURN(auto value, store->Get(ValueKey(trial_->name(), r.step(), worker_, r.name())));
    if (!value.has_value() || *value != r.data()) return conflict("differs from what is stored");
  }
  *skip = true;  // an identical resend: nothing to do
  return absl::OkStatus();
}

absl::StatusOr<WriteSession::Outcome> WriteSession::HandleRecords(v1::RecordBatch& batch) {
  const int n = batch.records_size();
  if (n == 0) return Outcome{};
  // value_size 0 with data: the whole value is in this message.
  for (auto& r : *batch.mutable_records()) {
    if (r.has_value() && r.value_size() == 0) r.set_value_size(r.data().size());
  }
  // A last record whose bytes are still to come waits for its chunks.
  const v1::TensorRecord& last = batch.records(n - 1);
  const bool waiting = last.has_value() && last.data().size() < last.value_size();
  for (int i = 0; i < n; ++i) {
    TK_RETURN_IF_ERROR(ValidateRecord(batch.records(i), !(waiting && i == n - 1)));
  }
  if (waiting) {
    partial_ = std::move(batch);
    return Outcome{};
  }

  // Check the whole message against committed steps and step modes before
  // encoding anything, so that a bad message leaves no trace.
  int64_t current = current_step_;
  int64_t committed = committed_;
  std::vector<bool> skip(n, false);
  std::map<uint64_t, StepInfo> step_modes;
  std::set<std::pair<uint64_t, std::string>> seen;
  for (int i = 0; i < n; ++i) {
    const v1::TensorRecord& r = batch.records(i);
    const int64_t step = static_cast<int64_t>(r.step());
    if (!seen.emplace(r.step(), r.name()).second) {
      return Bad(absl::StrCat("tensor '", r.name(), "' appears twice for step ", r.step(),
                              " in one message"));
    }
    if (step <= committed) {
      bool s = false;
      TK_RETURN_IF_ERROR(CheckCommitted(r, &s));
      skip[i] = s;
      continue;
    }
    if (step > current) {
      if (current >= 0) committed = std::max(committed, step - 1);
      current = step;
    }
    const StepInfo info{r.mode(), r.mode_step()};
    auto known = trial_->GetStep(r.step());
    auto local = step_modes.emplace(r.step(), info).first->second;
    for (const std::optional<StepInfo>& other : {known, std::optional<StepInfo>(local)}) {
      if (other.has_value() && (other->mode != info.mode || other->mode_step != info.mode_step)) {
        return MakeError(Reason::kConflict,
                         absl::StrCat("step ", r.step(), " of trial '", trial_->name(), "' is ",
                                      ModeName(other->mode), " step ", other->mode_step,
                                      "; tensor '", r.name(), "' says ", ModeName(info.mode),
                                      " step ", info.mode_step));
      }
    }
  }

  Outcome out;
  out.write = NewWrite();
  PendingWrite& w = *out.write;
  w.batch = collector_->store()->NewBatch();
  for (int i = 0; i < n; ++i) {
    if (skip[i]) continue;
    v1::TensorRecord& r = *batch.mutable_records(i);
    w.batch->Put(TensorKey(trial_->name(), r.name(), r.step(), worker_),
                 IndexEntry(r).SerializeAsString());
    if (r.has_value()) w.batch->Put(ValueKey(trial_->name(), r.step(), worker_, r.name()), r.data());
    IndexedRecord rec;
    rec.name = r.name();
    rec.step = r.step();
    rec.mode = r.mode();
    rec.mode_step = r.mode_step();
    rec.collections.assign(r.collections().begin(), r.collections().end());
    w.update.records.push_back(std::move(rec));
  }
  if (committed > committed_) w.update.committed_through = committed;
  current_step_ = current;
  committed_ = committed;
  return out;
}

}  // namespace tensorkeep
