#include "server/collector.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/stored_record.h"
#include "server/validation.h"
#include "spdlog/spdlog.h"
#include "storage/keys.h"
#include "storage/record_block.h"
#include "tensor/dtype.h"
#include "tensor/histogram.h"
#include "tensor/reductions.h"

namespace tensorkeep {

Collector::Collector(const CollectorOptions& options, TensorStore* store)
    : options_(options),
      store_(store),
      memory_(options.memory_budget_bytes),
      cache_memory_(
          memory_.Hold(std::min(options.value_cache_bytes, options.memory_budget_bytes / 4))),
      value_cache_(cache_memory_.bytes()),
      notifier_(std::make_shared<Notifier>(
          NotifierOptions{options.max_watchers, options.max_trial_watchers})),
      registry_(std::make_unique<WorkerRegistry>(
          WorkerRegistryOptions{absl::Seconds(options.worker_timeout_seconds),
                                options.max_push_streams},
          [this](const std::string& trial, const std::string& worker, uint64_t generation) {
            OnWorkerTimeout(trial, worker, generation);
          })),
      executor_(std::make_unique<Executor>(
          ExecutorOptions{options.executor_threads, options.executor_max_queued})) {}

Collector::~Collector() {
  registry_->Stop();
  executor_.reset();
  committer_.reset();
  notifier_->Stop();
}

absl::StatusOr<std::unique_ptr<Collector>> Collector::Create(const CollectorOptions& options,
                                                             TensorStore* store) {
  std::unique_ptr<Collector> c(new Collector(options, store));
  TK_RETURN_IF_ERROR(c->Recover());
  return c;
}

absl::Status Collector::CheckFormat() {
  TK_ASSIGN_OR_RETURN(auto format, store_->Get(FormatKey()));
  if (format.has_value()) {
    if (*format == kStorageFormat) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "the database holds storage format '", *format, "' but this tensorkeep-server reads '",
        kStorageFormat, "': move the data directory aside or choose another --data-dir"));
  }
  bool empty = true;
  TK_RETURN_IF_ERROR(store_->Scan("", [&](std::string_view, std::string_view) {
    empty = false;
    return false;
  }));
  if (!empty) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the database was written by an older tensorkeep (no storage format marker; this server "
        "reads '",
        kStorageFormat, "'): move the data directory aside or choose another --data-dir"));
  }
  auto batch = store_->NewBatch();
  batch->Put(FormatKey(), kStorageFormat);
  return store_->Write(batch.get(), /*sync=*/true);
}

absl::Status Collector::Recover() {
  TK_RETURN_IF_ERROR(CheckFormat());
  std::map<std::string, storage::TrialMeta> trial_meta;
  std::map<std::pair<std::string, std::string>, storage::WorkerMeta> worker_meta;
  absl::Status bad;
  auto corrupt = [&](absl::string_view what) {
    bad = absl::DataLossError(absl::StrCat("corrupt ", what, " entry in the database"));
    return false;
  };

  TK_RETURN_IF_ERROR(
      store_->Scan(FamilyPrefix(KeyFamily::kTrial), [&](std::string_view k, std::string_view v) {
        KeyReader r(k);
        KeyFamily f;
        std::string_view trial;
        storage::TrialMeta meta;
        if (!r.Family(&f) || !r.Str(&trial) || !meta.ParseFromArray(v.data(), v.size())) {
          return corrupt("trial");
        }
        trial_meta[std::string(trial)] = meta;
        return true;
      }));
  TK_RETURN_IF_ERROR(bad);
  for (const auto& [name, meta] : trial_meta) {
    auto trial = std::make_shared<Trial>(name, notifier_);
    TrialUpdate u;
    u.num_workers = meta.num_workers();
    if (meta.complete_below() > 0)
      u.complete_floor = static_cast<int64_t>(meta.complete_below() - 1);
    trial->ApplyQuietly(u);
    trials_[name] = trial;
  }
  // A trial whose metadata never became durable (its first write failed
  // before this version wrote metadata and data atomically) is recovered
  // with default metadata rather than refusing the directory.
  auto trial_of = [&](std::string_view name) -> Trial* {
    auto it = trials_.find(std::string(name));
    if (it != trials_.end()) return it->second.get();
    if (!ValidateTrialName(absl::string_view(name.data(), name.size())).ok()) return nullptr;
    spdlog::warn("recovery: trial '{}' has data but no metadata; recovered with defaults",
                 std::string(name));
    // (Not in trial_meta: the committer writes its metadata with its next write.)
    auto trial = std::make_shared<Trial>(std::string(name), notifier_);
    return trials_.emplace(std::string(name), std::move(trial)).first->second.get();
  };

  uint64_t records = 0, max_block_id = 0;
  TK_RETURN_IF_ERROR(
      store_->Scan(FamilyPrefix(KeyFamily::kBlock), [&](std::string_view k, std::string_view v) {
        KeyReader r(k);
        KeyFamily f;
        std::string_view trial, worker;
        uint64_t step, id;
        if (!r.Family(&f) || !r.Str(&trial) || !r.U64(&step) || !r.Str(&worker) || !r.U64(&id)) {
          return corrupt("record block key");
        }
        Trial* t = trial_of(trial);
        if (t == nullptr) return corrupt("record block (unknown trial)");
        auto block = RecordBlock::Parse(v);
        if (!block.ok()) {
          bad = block.status();
          return false;
        }
        TrialUpdate u;
        u.worker = std::string(worker);
        u.records.reserve(block->size());
        for (size_t i = 0; i < block->size(); ++i) {
          const RecordBlock::Entry e = block->at(i);
          auto meta = DecodeRecordMeta(e, step);
          if (!meta.ok()) {
            bad = meta.status();
            return false;
          }
          IndexedRecord rec;
          rec.name = std::move(*meta->mutable_name());
          rec.step = step;
          rec.mode = meta->mode();
          rec.mode_step = meta->mode_step();
          rec.collections.assign(std::make_move_iterator(meta->mutable_collections()->begin()),
                                 std::make_move_iterator(meta->mutable_collections()->end()));
          u.records.push_back(std::move(rec));
        }
        u.blocks.push_back(BlockRef{step, id, std::string(block->at(0).name),
                                    std::string(block->at(block->size() - 1).name)});
        t->ApplyQuietly(u);
        max_block_id = std::max(max_block_id, id);
        const uint64_t before = records;
        records += block->size();
        if (records / 1000000 != before / 1000000) {
          spdlog::info("recovery: {} tensor records indexed", records);
        }
        return true;
      }));
  TK_RETURN_IF_ERROR(bad);
  next_block_id_ = max_block_id + 1;

  TK_RETURN_IF_ERROR(
      store_->Scan(FamilyPrefix(KeyFamily::kWorker), [&](std::string_view k, std::string_view v) {
        KeyReader r(k);
        KeyFamily f;
        std::string_view trial, worker;
        storage::WorkerMeta meta;
        if (!r.Family(&f) || !r.Str(&trial) || !r.Str(&worker) ||
            !meta.ParseFromArray(v.data(), v.size())) {
          return corrupt("worker");
        }
        Trial* t = trial_of(trial);
        if (t == nullptr) return corrupt("worker (unknown trial)");
        TrialUpdate u;
        u.worker = std::string(worker);
        u.committed_through = meta.committed_through();
        u.finished = meta.closed();
        if (meta.lost()) {
          u.change = WorkerChange::kTimedOut;
          u.lost_reason = meta.lost_reason();
          u.lost_unix = meta.lost_unix();
        }
        t->ApplyQuietly(u);
        worker_meta[{std::string(trial), std::string(worker)}] = meta;
        return true;
      }));
  TK_RETURN_IF_ERROR(bad);

  TK_RETURN_IF_ERROR(
      store_->Scan(FamilyPrefix(KeyFamily::kRule), [&](std::string_view k, std::string_view v) {
        KeyReader r(k);
        KeyFamily f;
        std::string_view trial;
        TrialUpdate u;
        u.rule_status.emplace();
        if (!r.Family(&f) || !r.Str(&trial) || !u.rule_status->ParseFromArray(v.data(), v.size())) {
          return corrupt("rule status");
        }
        Trial* t = trial_of(trial);
        if (t == nullptr) return corrupt("rule status (unknown trial)");
        t->ApplyQuietly(u);
        return true;
      }));
  TK_RETURN_IF_ERROR(bad);

  for (const auto& [name, meta] : trial_meta) {
    if (meta.ended()) {
      TrialUpdate u;
      u.end_trial = true;
      trials_[name]->ApplyQuietly(u);
    }
  }
  spdlog::info("recovered {} trials, {} tensor records", trial_meta.size(), records);
  // Workers ACTIVE when the collector stopped get a fresh timeout: those that
  // reconnect in time stay ACTIVE, the others become LOST.
  std::vector<std::pair<std::string, std::string>> expected;
  for (const auto& [id, meta] : worker_meta) {
    if (meta.closed() || meta.lost() || trials_[id.first]->ended()) continue;
    expected.push_back(id);
  }
  committer_ = std::make_unique<Committer>(store_, options_.sync, std::move(trial_meta),
                                           std::move(worker_meta), options_.max_steps_per_trial);
  for (const auto& [trial, worker] : expected) registry_->Expect(trial, worker);
  if (!expected.empty() && options_.worker_timeout_seconds > 0) {
    spdlog::info("{} workers were active: each is lost unless it reconnects within {} s",
                 expected.size(), options_.worker_timeout_seconds);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Trial>> Collector::GetTrial(const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = trials_.find(name);
  if (it == trials_.end()) {
    TK_RETURN_IF_ERROR(ValidateTrialName(name));
    return MakeError(Reason::kTrialNotFound,
                     absl::StrCat("trial '", name, "' not found on this collector"));
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<Trial>> Collector::GetOrCreateTrial(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = trials_.find(name);
  if (it != trials_.end()) return it->second;
  if (trials_.size() >= options_.max_trials) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the collector holds ", trials_.size(), " trials, the most it may (max_trials); trial '",
        name, "' cannot be created: delete trials no longer needed, or use another collector"));
  }
  auto trial = std::make_shared<Trial>(name, notifier_);
  trials_.emplace(name, trial);
  return trial;
}

absl::StatusOr<uint64_t> Collector::ClaimWriter(const std::string& trial,
                                                const std::string& worker) {
  return registry_->Claim(trial, worker);
}

void Collector::ReleaseWriter(const std::string& trial, const std::string& worker, uint64_t id) {
  registry_->Release(trial, worker, id);
}

std::vector<v1::WorkerStatus> Collector::WorkerStatuses(const Trial& trial) const {
  std::vector<v1::WorkerStatus> out = trial.WorkerStatuses();
  for (auto& s : out) s.set_connected(registry_->Connected(trial.name(), s.worker()));
  return out;
}

void Collector::MarkConnected(
    const std::string& trial,
    google::protobuf::RepeatedPtrField<v1::WorkerStatus>* statuses) const {
  for (auto& s : *statuses) s.set_connected(registry_->Connected(trial, s.worker()));
}

namespace {

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

void Collector::OnWorkerTimeout(const std::string& trial, const std::string& worker,
                                uint64_t generation) {
  auto t = GetTrial(trial);
  if (!t.ok()) return;
  PendingWrite w;
  w.trial = *t;
  w.update.worker = worker;
  w.update.change = WorkerChange::kTimedOut;
  w.update.lost_reason =
      absl::StrCat("no Push stream for ", options_.worker_timeout_seconds, " s (--worker-timeout)");
  w.update.lost_unix = NowUnix();
  WorkerRegistry* registry = registry_.get();
  w.precondition = [registry, trial, worker, generation] {
    return registry->StillGone(trial, worker, generation);
  };
  w.done = [trial, worker](const absl::Status& s) {
    if (!s.ok()) {
      spdlog::error("trial '{}': could not record worker '{}' as lost: {}", trial, worker,
                    s.ToString());
    }
  };
  Submit(std::move(w));
}

void Collector::DeclareWorkerLost(const std::string& trial, const std::string& worker,
                                  std::function<void(absl::StatusOr<v1::WorkerStatus>)> done) {
  auto t = GetTrial(trial);
  if (!t.ok()) {
    done(t.status());
    return;
  }
  if (absl::Status valid = ValidateWorkerName(worker); !valid.ok()) {
    done(valid);
    return;
  }
  PendingWrite w;
  w.trial = *t;
  w.update.worker = worker;
  w.update.change = WorkerChange::kDeclaredLost;
  w.update.lost_reason = "declared lost by an operator";
  w.update.lost_unix = NowUnix();
  std::shared_ptr<Trial> held = *t;
  w.done = [this, held, worker, done = std::move(done)](const absl::Status& s) {
    if (!s.ok()) {
      done(s);
      return;
    }
    for (const v1::WorkerStatus& status : WorkerStatuses(*held)) {
      if (status.worker() == worker) {
        done(status);
        return;
      }
    }
    done(absl::InternalError(absl::StrCat("worker '", worker, "' vanished from the index")));
  };
  Submit(std::move(w));
}

std::vector<std::shared_ptr<Trial>> Collector::Trials() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::shared_ptr<Trial>> out;
  for (const auto& [name, t] : trials_) out.push_back(t);
  return out;
}

namespace {

absl::Status ReductionsOnly(const std::string& tensor, uint64_t step) {
  return MakeError(Reason::kTensorUnavailableForStep,
                   absl::StrCat("tensor '", tensor, "' at step ", step,
                                " was saved as reductions only (no raw value)"));
}

}  // namespace

absl::StatusOr<std::optional<Collector::Value>> Collector::FindRecord(
    const Trial& trial, uint64_t step, const std::string& worker, const std::string& tensor) const {
  for (uint64_t id : trial.BlocksFor(step, worker, tensor)) {
    TK_ASSIGN_OR_RETURN(auto bytes, store_->Get(BlockKey(trial.name(), step, worker, id)));
    if (!bytes.has_value()) {
      return absl::InternalError(
          absl::StrCat("record block ", id, " of step ", step, " is missing from the store"));
    }
    TK_ASSIGN_OR_RETURN(RecordBlock block, RecordBlock::Parse(*bytes));
    auto entry = block.Find(tensor);
    if (!entry.has_value()) continue;
    Value out;
    out.block_id = id;
    out.where.global_step = step;
    out.where.worker = worker;
    TK_ASSIGN_OR_RETURN(out.meta, DecodeRecordMeta(*entry, step));
    out.where.info = StepInfo{out.meta.mode(), out.meta.mode_step()};
    if (StoresInline(out.meta)) {
      out.data.assign(entry->data.data(), entry->data.size());
      out.data_loaded = out.meta.has_value();
    }
    return out;
  }
  return std::nullopt;
}

absl::StatusOr<Collector::Value> Collector::ReadRecord(const Trial& trial,
                                                       const std::string& tensor,
                                                       const Trial::Located& where) const {
  TK_ASSIGN_OR_RETURN(auto found, FindRecord(trial, where.global_step, where.worker, tensor));
  if (!found.has_value()) {
    return absl::InternalError(absl::StrCat("tensor '", tensor, "' at step ", where.global_step,
                                            " is indexed but missing from the store"));
  }
  found->where = where;
  return std::move(*found);
}

namespace {

std::string LargeValueKey(const Trial& trial, const Collector::Value& value) {
  return ValueKey(trial.name(), value.where.global_step, value.where.worker, value.block_id,
                  value.meta.name());
}

absl::Status CheckSize(const Collector::Value& value, size_t size) {
  if (size == value.meta.value_size()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("value of tensor '", value.meta.name(), "' at step ",
                                          value.where.global_step, " is truncated: ", size, " of ",
                                          value.meta.value_size(), " bytes"));
}

}  // namespace

absl::StatusOr<std::string> Collector::ReadLargeValue(const Value& value,
                                                      const std::string& key) const {
  auto data = store_->GetBulk(key);
  if (!data.ok()) {
    // The store names the file and offset; say which tensor it was.
    return absl::Status(data.status().code(),
                        absl::StrCat("reading tensor '", value.meta.name(), "' at step ",
                                     value.where.global_step, ": ", data.status().message()));
  }
  if (!data->has_value()) {
    return absl::DataLossError(absl::StrCat("value of tensor '", value.meta.name(), "' at step ",
                                            value.where.global_step, " is missing"));
  }
  TK_RETURN_IF_ERROR(CheckSize(value, (*data)->size()));
  return std::move(**data);
}

absl::Status Collector::LoadValue(const Trial& trial, Value* value) const {
  if (!value->meta.has_value()) {
    return ReductionsOnly(value->meta.name(), value->where.global_step);
  }
  if (value->data_loaded) return CheckSize(*value, value->data.size());
  const std::string key = LargeValueKey(trial, *value);
  if (auto cached = value_cache_.Lookup(key)) {
    value->data = *cached;  // checked when it was kept
  } else {
    TK_ASSIGN_OR_RETURN(value->data, ReadLargeValue(*value, key));
  }
  value->data_loaded = true;
  return absl::OkStatus();
}

absl::Status Collector::WithValue(
    const Trial& trial, const Value& value,
    const std::function<absl::Status(absl::Span<const char>)>& fn) const {
  if (!value.meta.has_value()) return ReductionsOnly(value.meta.name(), value.where.global_step);
  if (value.data_loaded) {
    TK_RETURN_IF_ERROR(CheckSize(value, value.data.size()));
    return fn(absl::Span<const char>(value.data.data(), value.data.size()));
  }
  const std::string key = LargeValueKey(trial, value);
  std::shared_ptr<const std::string> bytes = value_cache_.Lookup(key);
  if (bytes == nullptr) {
    TK_ASSIGN_OR_RETURN(std::string data, ReadLargeValue(value, key));
    bytes = std::make_shared<const std::string>(std::move(data));
    value_cache_.Insert(key, bytes);
  }
  return fn(absl::Span<const char>(bytes->data(), bytes->size()));
}

namespace {

// Hands out a value the value cache holds, without copying it whole.
class CachedBulkReader : public TensorStore::BulkReader {
 public:
  explicit CachedBulkReader(std::shared_ptr<const std::string> bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_->size(); }
  uint64_t remaining() const override { return bytes_->size() - done_; }
  absl::Status Read(size_t max_bytes, std::string* out) override {
    const size_t n = std::min<size_t>(max_bytes, bytes_->size() - done_);
    out->assign(*bytes_, done_, n);
    done_ += n;
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const std::string> bytes_;
  size_t done_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TensorStore::BulkReader>> Collector::OpenValue(
    const Trial& trial, const Value& value) const {
  if (!value.meta.has_value()) return ReductionsOnly(value.meta.name(), value.where.global_step);
  const std::string key = LargeValueKey(trial, value);
  std::unique_ptr<TensorStore::BulkReader> reader;
  if (auto cached = value_cache_.Lookup(key)) {
    reader = std::make_unique<CachedBulkReader>(std::move(cached));
  } else {
    auto opened = store_->OpenBulk(key);
    if (!opened.ok()) {
      return absl::Status(opened.status().code(),
                          absl::StrCat("reading tensor '", value.meta.name(), "' at step ",
                                       value.where.global_step, ": ", opened.status().message()));
    }
    if (*opened == nullptr) {
      return absl::DataLossError(absl::StrCat("value of tensor '", value.meta.name(), "' at step ",
                                              value.where.global_step, " is missing"));
    }
    reader = *std::move(opened);
  }
  TK_RETURN_IF_ERROR(CheckSize(value, reader->size()));
  return reader;
}

absl::StatusOr<Collector::Value> Collector::ReadValue(const Trial& trial, const std::string& tensor,
                                                      const Trial::Located& where) const {
  TK_ASSIGN_OR_RETURN(Value value, ReadRecord(trial, tensor, where));
  TK_RETURN_IF_ERROR(LoadValue(trial, &value));
  return value;
}

namespace {

absl::StatusOr<std::pair<std::shared_ptr<Trial>, Trial::Located>> LocateRequest(
    const Collector& c, const v1::TensorRequest& r) {
  TK_ASSIGN_OR_RETURN(auto trial, c.GetTrial(r.trial()));
  TK_RETURN_IF_ERROR(ValidateMode(r.mode(), /*allow_unspecified=*/true));
  TK_ASSIGN_OR_RETURN(auto where, trial->Locate(r.tensor(), r.step(), r.mode(), r.worker()));
  return std::make_pair(trial, where);
}

}  // namespace

absl::StatusOr<v1::ReductionsResponse> Collector::Reductions(
    const v1::ReductionsRequest& request) const {
  TK_ASSIGN_OR_RETURN(auto located, LocateRequest(*this, request.tensor()));
  const auto& [trial, where] = located;
  const std::string& tensor = request.tensor().tensor();
  TK_ASSIGN_OR_RETURN(Value value, ReadRecord(*trial, tensor, where));
  const v1::TensorRecord& meta = value.meta;
  v1::ReductionsResponse out;
  if (request.saved_only()) {
    *out.mutable_reductions() = meta.reductions();
    return out;
  }
  // Saved reductions win; the rest are computed in one pass over the value.
  std::vector<ReductionSpec> missing;
  std::vector<int> missing_index;
  for (int i = 0; i < request.reductions_size(); ++i) {
    const auto& spec = request.reductions(i);
    TK_ASSIGN_OR_RETURN(ReductionKind kind, ParseReduction(spec.name()));
    v1::Reduction* r = out.add_reductions();
    r->set_name(spec.name());
    r->set_abs(spec.abs());
    bool found = false;
    for (const auto& saved : meta.reductions()) {
      if (saved.name() == spec.name() && saved.abs() == spec.abs()) {
        r->set_value(saved.value());
        found = true;
        break;
      }
    }
    if (!found) {
      missing.push_back(ReductionSpec{kind, spec.abs()});
      missing_index.push_back(i);
    }
  }
  if (missing.empty()) return out;
  if (!meta.has_value()) {
    const auto& spec = request.reductions(missing_index.front());
    return MakeError(Reason::kTensorUnavailableForStep,
                     absl::StrCat("reduction ", spec.abs() ? "abs " : "", spec.name(),
                                  " of tensor '", tensor, "' at step ", where.global_step,
                                  " was not saved, and neither was the raw tensor"));
  }
  std::vector<double> computed;
  TK_RETURN_IF_ERROR(WithValue(*trial, value, [&](absl::Span<const char> data) -> absl::Status {
    TK_ASSIGN_OR_RETURN(computed,
                        ComputeReductions(static_cast<DType>(value.meta.dtype()), data, missing));
    return absl::OkStatus();
  }));
  for (size_t i = 0; i < missing.size(); ++i) {
    out.mutable_reductions(missing_index[i])->set_value(computed[i]);
  }
  return out;
}

absl::StatusOr<v1::HistogramResponse> Collector::Histogram(
    const v1::HistogramRequest& request) const {
  TK_ASSIGN_OR_RETURN(auto located, LocateRequest(*this, request.tensor()));
  const auto& [trial, where] = located;
  TK_ASSIGN_OR_RETURN(Value value, ReadRecord(*trial, request.tensor().tensor(), where));
  std::optional<std::pair<double, double>> range;
  if (request.has_range()) range = std::make_pair(request.range_min(), request.range_max());
  const int bins =
      request.bins() == 0 ? 30 : static_cast<int>(std::min<uint32_t>(request.bins(), 1u << 30));
  absl::StatusOr<tensorkeep::Histogram> h;
  TK_RETURN_IF_ERROR(WithValue(*trial, value, [&](absl::Span<const char> data) {
    h = ComputeHistogram(static_cast<DType>(value.meta.dtype()), data, bins, range);
    return absl::OkStatus();
  }));
  if (!h.ok()) return MakeError(Reason::kBadRequest, h.status().message());
  v1::HistogramResponse out;
  for (double e : h->edges) out.add_edges(e);
  for (uint64_t c : h->counts) out.add_counts(c);
  out.set_nan_count(h->nan_count);
  out.set_outside_count(h->outside_count);
  return out;
}

void Collector::EndTrial(const std::string& name, std::function<void(absl::StatusOr<bool>)> done) {
  auto trial = GetTrial(name);
  if (!trial.ok()) {
    done(trial.status());
    return;
  }
  const bool was_running = !(*trial)->ended();
  PendingWrite w;
  w.trial = *trial;
  w.update.end_trial = true;
  w.done = [name, was_running, done = std::move(done)](const absl::Status& s) {
    if (!s.ok()) {
      done(s);
      return;
    }
    if (was_running) spdlog::info("trial '{}' ended on request", name);
    done(was_running);
  };
  Submit(std::move(w));
}

void Collector::ReportRuleStatus(v1::RuleStatus status,
                                 std::function<void(absl::StatusOr<v1::RuleStatus>)> done) {
  // Checked here, before the write is queued.
  auto trial = [&]() -> absl::StatusOr<std::shared_ptr<Trial>> {
    TK_ASSIGN_OR_RETURN(auto t, GetTrial(status.trial()));
    TK_RETURN_IF_ERROR(ValidateWorkerName(status.rule()));
    if (status.state() < v1::RuleStatus::IN_PROGRESS || status.state() > v1::RuleStatus::ERROR) {
      return MakeError(Reason::kBadRequest,
                       "rule state must be IN_PROGRESS, NO_ISSUES_FOUND, ISSUES_FOUND or ERROR");
    }
    if (!status.action().empty() && status.action() != "stop") {
      return MakeError(Reason::kBadRequest,
                       absl::StrCat("unknown rule action ", QuoteInput(status.action()),
                                    ": use \"stop\" or none"));
    }
    if (status.message().size() > kMaxRuleMessageBytes) {
      return MakeError(Reason::kBadRequest,
                       absl::StrCat("rule status message is ", status.message().size(),
                                    " bytes long; the limit is ", kMaxRuleMessageBytes));
    }
    return t;
  }();
  if (!trial.ok()) {
    done(trial.status());
    return;
  }
  status.set_updated_unix(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  PendingWrite w;
  w.trial = *trial;
  w.update.rule_status = status;
  w.done = [status, done = std::move(done)](const absl::Status& s) {
    if (!s.ok()) {
      done(s);
      return;
    }
    if (status.state() == v1::RuleStatus::ISSUES_FOUND) {
      spdlog::info("trial '{}': rule '{}' found an issue at step {}: {}{}", status.trial(),
                   status.rule(), status.step(), status.message(),
                   status.action() == "stop" ? " (stop requested)" : "");
    }
    done(status);
  };
  Submit(std::move(w));
}

}  // namespace tensorkeep
