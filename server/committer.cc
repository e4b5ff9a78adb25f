#include "server/committer.h"

#include <chrono>
#include <vector>

#include "spdlog/spdlog.h"
#include "storage/keys.h"

namespace tensorkeep {

Committer::Committer(TensorStore* store, bool sync,
                     std::map<std::string, storage::TrialMeta> trials,
                     std::map<std::pair<std::string, std::string>, storage::WorkerMeta> workers)
    : store_(store),
      sync_(sync),
      trial_meta_(std::move(trials)),
      worker_meta_(std::move(workers)),
      thread_([this] { Run(); }) {}

Committer::~Committer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Committer::Submit(PendingWrite write) {
  absl::MutexLock lock(&mu_);
  if (write.batch != nullptr) queued_bytes_ += write.batch->ApproximateSize();
  queue_.push_back(std::move(write));
}

size_t Committer::queued_bytes() const {
  absl::MutexLock lock(&mu_);
  return queued_bytes_;
}

void Committer::MetadataFor(const PendingWrite& write,
                            std::unique_ptr<TensorStore::Batch>* before,
                            std::unique_ptr<TensorStore::Batch>* after) {
  const TrialUpdate& u = write.update;
  const std::string& trial = write.trial->name();
  auto put = [&](std::unique_ptr<TensorStore::Batch>* batch, const std::string& key,
                 const google::protobuf::Message& m) {
    if (*batch == nullptr) *batch = store_->NewBatch();
    (*batch)->Put(key, m.SerializeAsString());
  };

  auto [tit, created] = trial_meta_.try_emplace(trial);
  storage::TrialMeta& tm = tit->second;
  bool trial_changed = created;
  if (created) {
    tm.set_num_workers(1);
    tm.set_created_unix(std::chrono::duration<double>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
  }
  if (u.num_workers > tm.num_workers()) {
    tm.set_num_workers(u.num_workers);
    trial_changed = true;
  }
  if (u.end_trial && !tm.ended()) {
    tm.set_ended(true);
    trial_changed = true;
  }
  if (u.rule_status.has_value()) {
    const v1::RuleStatus& rs = *u.rule_status;
    put(before, RuleKey(trial, rs.rule()), rs);
    if (rs.action() == "stop" && rs.state() == v1::RuleStatus::ISSUES_FOUND &&
        !tm.stop_requested()) {
      tm.set_stop_requested(true);
      trial_changed = true;
    }
  }
  if (trial_changed) put(before, TrialKey(trial), tm);
  if (!u.worker.empty()) {
    auto [wit, wcreated] = worker_meta_.try_emplace({trial, u.worker});
    storage::WorkerMeta& wm = wit->second;
    bool worker_changed = wcreated;
    if (wcreated) wm.set_committed_through(StepTracker::kNone);
    if (u.committed_through > wm.committed_through()) {
      wm.set_committed_through(u.committed_through);
      worker_changed = true;
    }
    if (u.finished && !wm.closed()) {
      wm.set_closed(true);
      worker_changed = true;
    }
    if (worker_changed) put(after, WorkerKey(trial, u.worker), wm);
  }
}

void Committer::Run() {
  std::vector<PendingWrite> group;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Committer* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return c->stopping_ || !c->queue_.empty();
          },
          this));
      if (queue_.empty() && stopping_) return;
      // Group up to ~64 MiB so that one fsync (with --sync) covers many.
      size_t bytes = 0;
      while (!queue_.empty() && (group.empty() || bytes < (64u << 20))) {
        if (queue_.front().batch != nullptr) bytes += queue_.front().batch->ApproximateSize();
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_bytes_ -= std::min(queued_bytes_, bytes);
    }
    // Every batch of the group, in order: metadata before, data, metadata
    // after. With --sync only the last write is fsynced; that makes every
    // earlier one durable as well (one log file, written in order).
    std::vector<absl::Status> results(group.size());
    std::vector<std::pair<size_t, std::unique_ptr<TensorStore::Batch>>> writes;
    for (size_t i = 0; i < group.size(); ++i) {
      std::unique_ptr<TensorStore::Batch> before, after;
      MetadataFor(group[i], &before, &after);
      if (before != nullptr) writes.emplace_back(i, std::move(before));
      if (group[i].batch != nullptr) writes.emplace_back(i, std::move(group[i].batch));
      if (after != nullptr) writes.emplace_back(i, std::move(after));
    }
    if (sync_ && writes.empty() && !group.empty()) writes.emplace_back(0, store_->NewBatch());
    for (size_t k = 0; k < writes.size(); ++k) {
      auto& [i, batch] = writes[k];
      if (!results[i].ok()) continue;
      results[i] = store_->Write(batch.get(), sync_ && k + 1 == writes.size());
      if (!results[i].ok()) spdlog::error("commit failed: {}", results[i].ToString());
    }
    if (sync_ && !writes.empty() && !results[writes.back().first].ok()) {
      // The fsync covering the whole group failed: nothing is known durable.
      for (auto& r : results) {
        if (r.ok()) r = results[writes.back().first];
      }
    }
    for (size_t i = 0; i < group.size(); ++i) {
      if (results[i].ok()) group[i].trial->Apply(group[i].update);
      if (group[i].done) group[i].done(results[i]);
    }
    group.clear();
  }
}

}  // namespace tensorkeep
