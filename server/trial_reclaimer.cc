#include "server/trial_reclaimer.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "storage/keys.h"
#include "storage/stored.pb.h"

namespace tensorkeep {
namespace {

// Keys deleted in one atomic write: small enough that the committer's next
// group waits at most a few milliseconds for it.
constexpr size_t kKeysPerBatch = 4096;

// The smallest key after every key that starts with `prefix`.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    const auto last = static_cast<uint8_t>(prefix.back());
    if (last != 0xFF) {
      prefix.back() = static_cast<char>(last + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, static_cast<char>(0xFF));  // not reached: prefixes start with a family
}

}  // namespace

TrialReclaimer::TrialReclaimer(TensorStore* store, TrialReclaimerOptions options,
                               std::function<void()> sweep)
    : store_(store), options_(std::move(options)), sweep_(std::move(sweep)) {
  // The deletions a previous run did not finish: one job each.
  std::vector<std::string> left;
  absl::Status scanned = store_->ScanKeys(
      FamilyPrefix(KeyFamily::kDeletedTrial), "", [&](std::string_view key, size_t) {
        KeyReader r(key);
        KeyFamily f;
        std::string_view trial;
        if (r.Family(&f) && r.Str(&trial) && (left.empty() || left.back() != trial)) {
          left.emplace_back(trial);
        }
        return true;
      });
  if (!scanned.ok()) spdlog::error("listing unfinished trial deletions: {}", scanned.ToString());
  {
    absl::MutexLock lock(&mu_);
    for (std::string& trial : left) {
      spdlog::info("trial '{}' was being deleted when the collector stopped: finishing", trial);
      jobs_.push_back(Job{std::move(trial), nullptr});
    }
    // An empty name: reclaim value-log space only (garbage a crash left).
    jobs_.push_back(Job{"", nullptr});
  }
  thread_ = std::thread([this] { Run(); });
}

TrialReclaimer::~TrialReclaimer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void TrialReclaimer::Reclaim(std::string trial, Done done) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(Job{std::move(trial), std::move(done)});
}

size_t TrialReclaimer::pending() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size() + (busy_ ? 1 : 0);
}

absl::Status TrialReclaimer::Fault(std::string_view stage) const {
  if (!options_.fault_point) return absl::OkStatus();
  return options_.fault_point(stage);
}

void TrialReclaimer::Run() {
  auto next_sweep = std::chrono::steady_clock::now();
  const auto sweep_every = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::max(options_.sweep_seconds, 0.0)));
  for (;;) {
    Job job;
    bool sweep = false;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !jobs_.empty();
      };
      if (sweep_ && options_.sweep_seconds > 0) {
        const auto left = next_sweep - std::chrono::steady_clock::now();
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(left));
      } else {
        mu_.Await(absl::Condition(&ready));
      }
      if (stopping_) return;
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
        busy_ = true;
      } else {
        sweep = true;
      }
    }
    if (sweep) {
      next_sweep = std::chrono::steady_clock::now() + sweep_every;
      sweep_();
      continue;
    }
    absl::StatusOr<Result> result;
    if (job.trial.empty()) {
      auto values = store_->ReclaimValueSpace();
      if (values.ok()) {
        result = Result{};
        result->values = *values;
      } else {
        result = values.status();
      }
    } else {
      result = RemoveTrial(job.trial);
    }
    if (!result.ok()) {
      spdlog::error("reclaiming the space of deleted trial '{}': {}", job.trial,
                    result.status().ToString());
    } else if (result->values.files_dropped > 0) {
      spdlog::info("value log: {} files removed ({} rewritten, {} live bytes copied), {} bytes "
                   "freed",
                   result->values.files_dropped, result->values.files_rewritten,
                   result->values.bytes_copied, result->values.bytes_freed);
    }
    if (job.done) job.done(result);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

absl::Status TrialReclaimer::RemoveBlocks(const std::string& trial, uint64_t bound,
                                          Result* result, uint64_t* min_id, uint64_t* max_id) {
  const std::string prefix = TrialPrefix(KeyFamily::kBlock, trial);
  std::string from;
  for (;;) {
    // A batch of block keys (ids below the bound: a new trial of the same
    // name has larger ones), then the index entries of their large values.
    std::vector<std::pair<std::string, uint64_t>> blocks;
    std::string last;
    TK_RETURN_IF_ERROR(store_->ScanKeys(prefix, from, [&](std::string_view key, size_t bytes) {
      last.assign(key);
      KeyReader r(key);
      KeyFamily f;
      std::string_view t, worker;
      uint64_t step = 0, id = 0;
      if (!r.Family(&f) || !r.Str(&t) || !r.U64(&step) || !r.Str(&worker) || !r.U64(&id)) {
        return true;  // not a block key of this schema: left alone
      }
      if (id >= bound) return true;
      blocks.emplace_back(std::string(key), id);
      result->index_bytes += key.size() + bytes;
      return blocks.size() < kKeysPerBatch;
    }));
    if (blocks.empty() && last.empty()) return absl::OkStatus();
    from = last + '\0';
    if (blocks.empty()) continue;  // only a new trial's blocks in this range
    TK_RETURN_IF_ERROR(Fault("delete.batch"));
    auto batch = store_->NewBatch();
    uint64_t keys = 0;
    for (const auto& [key, id] : blocks) {
      batch->Delete(key);
      ++keys;
      *min_id = std::min(*min_id, id);
      *max_id = std::max(*max_id, id);
      TK_RETURN_IF_ERROR(
          store_->ScanKeys(BlockValuesPrefix(id, trial), "", [&](std::string_view key, size_t n) {
            batch->Delete(key);
            ++keys;
            result->index_bytes += key.size() + n;
            return true;
          }));
    }
    const uint64_t garbage_before = store_->Space().value_garbage_bytes;
    TK_RETURN_IF_ERROR(store_->Write(batch.get(), /*sync=*/false));
    const uint64_t garbage_after = store_->Space().value_garbage_bytes;
    if (garbage_after > garbage_before) result->value_bytes += garbage_after - garbage_before;
    result->keys += keys;
  }
}

absl::StatusOr<TrialReclaimer::Result> TrialReclaimer::RemoveTrial(const std::string& trial) {
  Result result;
  // Its DeletedTrial entries (one per deletion not finished; the largest
  // bound covers the others).
  std::vector<std::string> entries;
  uint64_t bound = 0;
  TK_RETURN_IF_ERROR(store_->ScanKeys(TrialPrefix(KeyFamily::kDeletedTrial, trial), "",
                                      [&](std::string_view key, size_t) {
                                        KeyReader r(key);
                                        KeyFamily f;
                                        std::string_view t;
                                        uint64_t b = 0;
                                        if (r.Family(&f) && r.Str(&t) && r.U64(&b) && t == trial) {
                                          entries.emplace_back(key);
                                          bound = std::max(bound, b);
                                        }
                                        return true;
                                      }));
  if (entries.empty()) return result;  // finished already
  uint64_t min_id = std::numeric_limits<uint64_t>::max(), max_id = 0;
  TK_RETURN_IF_ERROR(RemoveBlocks(trial, bound, &result, &min_id, &max_id));
  // Give the space of the deleted index entries back now.
  const std::string blocks = TrialPrefix(KeyFamily::kBlock, trial);
  TK_RETURN_IF_ERROR(store_->Compact(blocks, PrefixEnd(blocks)));
  if (min_id <= max_id) {
    TK_RETURN_IF_ERROR(store_->Compact(
        KeyBuilder(KeyFamily::kValue).U64(min_id).Take(),
        max_id == std::numeric_limits<uint64_t>::max()
            ? FamilyPrefix(static_cast<KeyFamily>(static_cast<uint8_t>(KeyFamily::kValue) + 1))
            : KeyBuilder(KeyFamily::kValue).U64(max_id + 1).Take()));
  }
  TK_RETURN_IF_ERROR(Fault("delete.compacted"));
  // Last: nothing of the trial is left.
  auto batch = store_->NewBatch();
  for (const std::string& key : entries) batch->Delete(key);
  TK_RETURN_IF_ERROR(store_->Write(batch.get(), /*sync=*/true));
  spdlog::info("trial '{}': {} index entries removed ({} bytes), {} bytes of large values are "
               "value-log garbage",
               trial, result.keys, result.index_bytes, result.value_bytes);
  TK_ASSIGN_OR_RETURN(result.values, store_->ReclaimValueSpace());
  return result;
}

}  // namespace tensorkeep
