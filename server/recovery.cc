// Collector::Recover: the in-memory state (trials, steps, workers, rule statuses)
// rebuilt from the store at start-up, after checking the directory's format.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/collector.h"
#include "server/stored_record.h"
#include "server/validation.h"
#include "spdlog/spdlog.h"
#include "storage/keys.h"
#include "storage/record_block.h"
#include "tensor/dtype.h"
#include "tensor/histogram.h"
#include "tensor/reductions.h"

namespace tensorkeep {

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

  // Trials being deleted (server/trial_reclaimer.h): their blocks with ids
  // below the bound are ignored here and removed by the reclaimer.
  std::map<std::string, uint64_t, std::less<>> deleted_below;
  uint64_t max_bound = 0;
  TK_RETURN_IF_ERROR(store_->ScanKeys(
      FamilyPrefix(KeyFamily::kDeletedTrial), "", [&](std::string_view k, size_t) {
        KeyReader r(k);
        KeyFamily f;
        std::string_view trial;
        uint64_t bound = 0;
        if (!r.Family(&f) || !r.Str(&trial) || !r.U64(&bound)) return corrupt("deleted trial");
        uint64_t& b = deleted_below[std::string(trial)];
        b = std::max(b, bound);
        max_bound = std::max(max_bound, bound);
        return true;
      }));
  TK_RETURN_IF_ERROR(bad);
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
    trial->SetUnpublished(meta.unpublished());
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
        if (auto d = deleted_below.find(trial); d != deleted_below.end() && id < d->second) {
          return true;  // of a deleted trial
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
  // New blocks must never fall under a deletion's bound (the reclaimer
  // would take a new trial's blocks for the deleted one's).
  next_block_id_ = std::max(max_block_id + 1, max_bound);

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
        u.recovered_attempt = true;
        u.attempt = meta.attempt();
        for (const storage::WorkerRestart& r : meta.restarts()) {
          v1::WorkerRestart& out = u.restarts.emplace_back();
          out.set_attempt(r.attempt());
          out.set_started_unix(r.started_unix());
          out.set_previous_committed_through(r.previous_committed_through());
        }
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

  TK_RETURN_IF_ERROR(store_->Scan(
      FamilyPrefix(KeyFamily::kCollections), [&](std::string_view k, std::string_view v) {
        KeyReader r(k);
        KeyFamily f;
        std::string_view trial, worker;
        auto stored = std::make_shared<storage::WorkerCollections>();
        if (!r.Family(&f) || !r.Str(&trial) || !r.Str(&worker) ||
            !stored->ParseFromArray(v.data(), v.size())) {
          return corrupt("collections");
        }
        Trial* t = trial_of(trial);
        if (t == nullptr) return corrupt("collections (unknown trial)");
        TrialUpdate u;
        u.collections = std::move(stored);
        u.collections_worker = std::string(worker);
        t->ApplyQuietly(u);
        return true;
      }));
  TK_RETURN_IF_ERROR(bad);

  for (const auto& [name, meta] : trial_meta) {
    if (meta.ended()) {
      TrialUpdate u;
      u.end_trial = true;
      trials_[name]->ApplyQuietly(u);
      if (meta.ended_unix() > 0) trials_[name]->NoteEnded(meta.ended_unix());
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
                                           std::move(worker_meta), options_.max_steps_per_trial,
                                           &next_block_id_, options_.clock);
  for (const auto& [trial, worker] : expected) registry_->Expect(trial, worker);
  if (!expected.empty() && options_.worker_timeout_seconds > 0) {
    spdlog::info("{} workers were active: each is lost unless it reconnects within {} s",
                 expected.size(), options_.worker_timeout_seconds);
  }
  return absl::OkStatus();
}

}  // namespace tensorkeep
