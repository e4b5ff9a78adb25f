#include "server/views/tensor_views.h"

#include <atomic>
#include <thread>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/validation.h"

namespace tensorkeep {
namespace {

// A reduction series as cached: points sorted by step.
struct CachedSeries {
  std::vector<SeriesPoint> points;
};

std::string Key(std::initializer_list<std::string_view> parts) {
  std::string key;
  for (std::string_view p : parts) {
    key.append(p.data(), p.size());
    key.push_back('\0');
  }
  return key;
}

}  // namespace

TensorViews::TensorViews(Collector* collector, size_t cache_bytes)
    : collector_(collector), cache_(collector->memory(), cache_bytes) {}

absl::StatusOr<std::vector<Trial::Located>> TensorViews::Locate(const Trial& trial,
                                                                const TensorRange& range,
                                                                size_t max_steps) const {
  TK_RETURN_IF_ERROR(ValidateMode(range.mode, /*allow_unspecified=*/true));
  if (range.to != 0 && range.to <= range.from) {
    return MakeError(Reason::kBadRequest,
                     absl::StrCat("the step range [", range.from, ", ", range.to, ") is empty"));
  }
  TK_ASSIGN_OR_RETURN(
      auto located, trial.LocateAll(range.tensor, range.mode, range.worker, range.from, range.to));
  if (located.size() > max_steps) {
    return MakeError(Reason::kBadRequest,
                     absl::StrCat("tensor '", range.tensor, "' has ", located.size(),
                                  " steps in the range, more than the ", max_steps,
                                  " one request may cover: narrow it with from and to"));
  }
  return located;
}

absl::StatusOr<std::vector<SeriesPoint>> TensorViews::ReductionSeries(const Trial& trial,
                                                                      const TensorRange& range,
                                                                      const std::string& reduction,
                                                                      bool abs, size_t max_steps) {
  TK_ASSIGN_OR_RETURN(auto located, Locate(trial, range, max_steps));
  // (A restarted worker's rewrites of steps make what was computed stale.)
  const std::string key =
      Key({"series", trial.name(), std::to_string(trial.rewrites()), range.tensor, range.worker,
           std::to_string(range.mode), reduction, abs ? "abs" : ""});
  std::shared_ptr<const CachedSeries> cached = cache_.Get<CachedSeries>(key);
  auto find = [&](uint64_t step) -> const SeriesPoint* {
    if (cached == nullptr) return nullptr;
    auto it = std::lower_bound(cached->points.begin(), cached->points.end(), step,
                               [](const SeriesPoint& p, uint64_t s) { return p.step < s; });
    return it != cached->points.end() && it->step == step ? &*it : nullptr;
  };
  std::vector<SeriesPoint> out;
  std::vector<SeriesPoint> fresh;
  out.reserve(located.size());
  v1::ReductionsRequest request;
  request.mutable_tensor()->set_trial(trial.name());
  request.mutable_tensor()->set_tensor(range.tensor);
  request.mutable_tensor()->set_mode(v1::GLOBAL);
  v1::ReductionSpec* spec = request.add_reductions();
  spec->set_name(reduction);
  spec->set_abs(abs);
  for (const Trial::Located& where : located) {
    if (const SeriesPoint* p = find(where.global_step)) {
      out.push_back(*p);
      continue;
    }
    request.mutable_tensor()->set_step(where.global_step);
    request.mutable_tensor()->set_worker(where.worker);
    auto r = collector_->Reductions(request);
    if (!r.ok()) {
      // Saved as other reductions only: no point at this step.
      if (GetReason(r.status()) == Reason::kTensorUnavailableForStep) continue;
      return r.status();
    }
    const SeriesPoint p{where.global_step, r->reductions(0).value()};
    out.push_back(p);
    fresh.push_back(p);
  }
  if (!fresh.empty()) {
    auto merged = std::make_shared<CachedSeries>();
    if (cached != nullptr) merged->points = cached->points;
    merged->points.insert(merged->points.end(), fresh.begin(), fresh.end());
    std::sort(merged->points.begin(), merged->points.end(),
              [](const SeriesPoint& a, const SeriesPoint& b) { return a.step < b.step; });
    const size_t bytes = merged->points.size() * sizeof(SeriesPoint);
    cache_.Put<CachedSeries>(key, std::move(merged), bytes);
  }
  return out;
}

absl::StatusOr<TensorViews::StepDistributions> TensorViews::Distributions(const Trial& trial,
                                                                          const TensorRange& range,
                                                                          size_t max_steps) {
  TK_ASSIGN_OR_RETURN(auto located, Locate(trial, range, max_steps));
  // Each step's distribution: from the cache, else one read and scan of its
  // value. The scans of a cold range are spread over the machine's cores
  // (each value is independent); null for a step saved as reductions only.
  std::vector<std::shared_ptr<const StepDistribution>> found(located.size());
  // `buffer`: the scanning thread's, reused for every value it reads (no
  // allocation, zero-filling or page faults a value, and the value cache,
  // which rule workers' reductions use, is left alone).
  const auto one = [&](size_t i, std::string* buffer) -> absl::Status {
    const Trial::Located& where = located[i];
    // (A restarted worker's rewrites of steps make what was computed stale.)
    const std::string key =
        Key({"dist", trial.name(), std::to_string(trial.rewrites()), range.tensor, where.worker,
             std::to_string(where.global_step)});
    std::shared_ptr<const StepDistribution> d = cache_.Get<StepDistribution>(key);
    if (d == nullptr) {
      TK_ASSIGN_OR_RETURN(Collector::Value value,
                          collector_->ReadRecord(trial, range.tensor, where));
      if (!value.meta.has_value()) return absl::OkStatus();  // reductions only
      absl::Span<const char> data(value.data.data(), value.data.size());
      if (!value.data_loaded) {
        TK_ASSIGN_OR_RETURN(auto reader, collector_->OpenValue(trial, value));
        TK_RETURN_IF_ERROR(reader->Read(reader->size(), buffer));
        data = absl::Span<const char>(buffer->data(), buffer->size());
      }
      absl::StatusOr<StepDistribution> computed =
          ComputeStepDistribution(static_cast<DType>(value.meta.dtype()), data);
      if (!computed.ok()) return MakeError(Reason::kBadRequest, computed.status().message());
      auto shared = std::make_shared<const StepDistribution>(std::move(*computed));
      cache_.Put<StepDistribution>(key, shared, shared->bytes());
      d = std::move(shared);
    }
    found[i] = std::move(d);
    return absl::OkStatus();
  };
  const size_t threads =
      std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), kMaxScanThreads,
                        (located.size() + 7) / 8});
  std::vector<absl::Status> errors(std::max<size_t>(threads, 1));
  std::atomic<size_t> next{0};
  const auto work = [&](size_t t) {
    std::string buffer;
    for (size_t i; (i = next.fetch_add(1)) < located.size();) {
      absl::Status s = one(i, &buffer);
      if (!s.ok()) {
        errors[t] = std::move(s);
        next.store(located.size());  // the others stop too
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
  for (absl::Status& e : errors) {
    if (!e.ok()) return e;
  }
  StepDistributions out;
  out.reserve(located.size());
  for (size_t i = 0; i < located.size(); ++i) {
    if (found[i] != nullptr) out.emplace_back(located[i].global_step, std::move(found[i]));
  }
  return out;
}

}  // namespace tensorkeep
