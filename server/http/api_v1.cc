#include "server/http/api_v1.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "proto/limits.pb.h"
#include "server/http/http_errors.h"
#include "server/http/json_writer.h"
#include "server/validation.h"
#include "spdlog/spdlog.h"
#include "tensor/reductions.h"

namespace tensorkeep {
namespace {

// TensorBoard's Distributions: the percentiles of a normal distribution at
// 0, ±1, ±2, ±3 standard deviations, and the extremes.
constexpr double kPercentiles[] = {0, 6.68, 15.87, 30.85, 50, 69.15, 84.13, 93.32, 100};
constexpr size_t kPercentileCount = sizeof(kPercentiles) / sizeof(kPercentiles[0]);
constexpr char kTrialPath[] = R"(/api/v1/trials/([A-Za-z0-9._-]{1,128}))";

absl::Status BadParam(const std::string& name, const std::string& why) {
  return MakeError(Reason::kBadRequest, absl::StrCat("parameter '", name, "': ", why));
}

absl::StatusOr<uint64_t> UintParam(const httplib::Request& req, const std::string& name,
                                   uint64_t fallback, uint64_t max) {
  if (!req.has_param(name.c_str())) return fallback;
  const std::string v = req.get_param_value(name.c_str());
  uint64_t n = 0;
  if (!absl::SimpleAtoi(v, &n)) {
    return BadParam(name, absl::StrCat("not a non-negative integer: ", QuoteInput(v)));
  }
  if (n > max) return BadParam(name, absl::StrCat(n, " is above its limit ", max));
  return n;
}

absl::StatusOr<double> DoubleParam(const httplib::Request& req, const std::string& name) {
  const std::string v = req.get_param_value(name.c_str());
  double d = 0;
  if (!absl::SimpleAtod(v, &d) || !std::isfinite(d)) {
    return BadParam(name, absl::StrCat("not a finite number: ", QuoteInput(v)));
  }
  return d;
}

bool BoolParam(const httplib::Request& req, const std::string& name) {
  const std::string v = req.get_param_value(name.c_str());
  return v == "1" || v == "true" || v == "yes";
}

absl::StatusOr<int> ModeParam(const httplib::Request& req) {
  if (!req.has_param("mode")) return 0;
  const std::string v = req.get_param_value("mode");
  v1::Mode mode;
  int n = 0;
  if (v1::Mode_Parse(v, &mode)) {
    n = mode;
  } else if (!absl::SimpleAtoi(v, &n)) {
    return BadParam("mode", absl::StrCat("not TRAIN, EVAL, PREDICT or GLOBAL: ", QuoteInput(v)));
  }
  TK_RETURN_IF_ERROR(ValidateMode(n, /*allow_unspecified=*/true));
  return n;
}

absl::StatusOr<std::string> TensorParam(const httplib::Request& req) {
  const std::string tensor = req.get_param_value("tensor");
  if (tensor.empty()) return BadParam("tensor", "missing");
  if (tensor.size() > kMaxTensorName) {
    return BadParam("tensor", absl::StrCat("longer than ", kMaxTensorName, " bytes"));
  }
  return tensor;
}

absl::StatusOr<TensorRange> RangeParams(const httplib::Request& req) {
  TensorRange r;
  TK_ASSIGN_OR_RETURN(r.tensor, TensorParam(req));
  r.worker = req.get_param_value("worker");
  if (r.worker.size() > kMaxWorkerName) return BadParam("worker", "too long");
  TK_ASSIGN_OR_RETURN(r.mode, ModeParam(req));
  TK_ASSIGN_OR_RETURN(r.from, UintParam(req, "from", 0, kMaxStep));
  TK_ASSIGN_OR_RETURN(r.to, UintParam(req, "to", 0, kMaxStep));
  return r;
}

void SendJson(httplib::Response& res, JsonWriter& json) {
  res.status = 200;
  res.set_content(json.Take(), "application/json");
}

void WriteRule(JsonWriter& j, const v1::RuleStatus& r) {
  j.BeginObject();
  j.Key("rule").String(r.rule());
  j.Key("state").String(v1::RuleStatus_State_Name(r.state()));
  j.Key("step").Int(r.step());
  j.Key("last_evaluated_step").Int(r.last_evaluated_step());
  j.Key("message").String(r.message());
  j.Key("action").String(r.action());
  j.Key("updated_unix").Number(r.updated_unix());
  j.EndObject();
}

// A trial as /trials lists it and events send it.
void WriteTrial(JsonWriter& j, const v1::TrialSummary& s,
                const std::vector<v1::RuleStatus>& rules) {
  j.BeginObject();
  j.Key("name").String(s.name());
  j.Key("state").String(s.ended() ? "ENDED" : "RUNNING");
  j.Key("ended").Bool(s.ended());
  j.Key("num_workers").Uint(s.num_workers());
  j.Key("num_steps").Uint(s.num_steps());
  j.Key("last_step").Int(s.last_step());
  j.Key("complete_through").Int(s.complete_through());
  j.Key("num_tensors").Uint(s.num_tensors());
  j.Key("stop_requested").Bool(s.stop_requested());
  j.Key("stop_reason").String(s.stop_reason());
  j.Key("modes").BeginArray();
  for (int m : s.modes()) j.String(ModeName(m));
  j.EndArray();
  j.Key("workers").BeginArray();
  for (const auto& w : s.worker_statuses()) {
    j.BeginObject();
    j.Key("worker").String(w.worker());
    j.Key("state").String(v1::WorkerState_Name(w.state()));
    j.Key("last_step").Int(w.last_step());
    j.Key("committed_through").Int(w.committed_through());
    j.Key("connected").Bool(w.connected());
    j.Key("reason").String(w.reason());
    j.Key("since_unix").Number(w.since_unix());
    j.Key("attempt").Uint(w.attempt());
    j.Key("restarts").BeginArray();
    for (const auto& r : w.restarts()) {
      j.BeginObject();
      j.Key("attempt").Uint(r.attempt());
      j.Key("started_unix").Number(r.started_unix());
      j.Key("previous_committed_through").Int(r.previous_committed_through());
      j.EndObject();
    }
    j.EndArray();
    j.EndObject();
  }
  j.EndArray();
  j.Key("rules").BeginArray();
  for (const auto& r : rules) WriteRule(j, r);
  j.EndArray();
  j.EndObject();
}

std::string TrialJson(const Collector& c, const Trial& t) {
  JsonWriter j;
  WriteTrial(j, c.SummaryOf(t), t.RuleStatuses());
  return j.Take();
}

void WriteEnvelope(JsonWriter& j, const std::vector<EnvelopeBucket>& buckets) {
  auto column = [&](const char* name, auto get) {
    j.Key(name).BeginArray();
    for (const auto& b : buckets) get(b);
    j.EndArray();
  };
  column("step", [&](const EnvelopeBucket& b) { j.Uint(b.first_step); });
  column("step_end", [&](const EnvelopeBucket& b) { j.Uint(b.last_step); });
  column("min", [&](const EnvelopeBucket& b) { j.Number(b.min); });
  column("max", [&](const EnvelopeBucket& b) { j.Number(b.max); });
  column("mean", [&](const EnvelopeBucket& b) { j.Number(b.mean); });
  column("min_step", [&](const EnvelopeBucket& b) { j.Uint(b.min_step); });
  column("max_step", [&](const EnvelopeBucket& b) { j.Uint(b.max_step); });
}

// One collection of the trial endpoint: its tensors and, when a writer
// configured it (PutCollections), that configuration (docs/http-api.md).
void WriteCollection(JsonWriter& j, const v1::CollectionInfo& info) {
  auto strings = [&j](const auto& list) {
    j.BeginArray();
    for (const auto& x : list) j.String(x);
    j.EndArray();
  };
  const v1::CollectionConfig& cfg = info.config();
  j.BeginObject();
  j.Key("name").String(info.name());
  j.Key("tensors").Uint(static_cast<uint64_t>(info.tensor_names_size()));
  j.Key("configured").Bool(info.configured());
  j.Key("configured_by");
  strings(info.configured_by());
  j.Key("include_regex");
  strings(cfg.include_regex());  // empty when not configured
  j.Key("save_config");
  if (!info.configured() || cfg.save_configs_size() == 0) {
    j.Null();
  } else {
    j.BeginObject();
    for (const v1::SaveConfigMode& m : cfg.save_configs()) {
      j.Key(ModeName(m.mode())).BeginObject();
      j.Key("save_interval").Uint(m.save_interval());
      j.Key("start_step").Uint(m.start_step());
      j.Key("end_step");
      if (m.has_end_step()) {
        j.Uint(m.end_step());
      } else {
        j.Null();
      }
      j.Key("save_steps").BeginArray();
      for (uint64_t step : m.save_steps()) j.Uint(step);
      j.EndArray().EndObject();
    }
    j.EndObject();
  }
  j.Key("reduction_config");
  if (!info.configured() || !cfg.has_reduction_config()) {
    j.Null();
  } else {
    const v1::ReductionConfig& r = cfg.reduction_config();
    j.BeginObject();
    j.Key("reductions");
    strings(r.reductions());
    j.Key("abs_reductions");
    strings(r.abs_reductions());
    j.Key("norms");
    strings(r.norms());
    j.Key("abs_norms");
    strings(r.abs_norms());
    j.Key("save_raw_tensor").Bool(r.save_raw_tensor());
    j.Key("save_shape").Bool(r.save_shape());
    j.EndObject();
  }
  j.Key("save_histogram");
  if (info.configured()) {
    j.Bool(cfg.save_histogram());
  } else {
    j.Null();
  }
  j.EndObject();
}

}  // namespace

// One open /api/v1/events stream: woken by its trial's commits, or (the
// trial list's stream) by every trial's, which note the trials they changed.
struct ApiV1::Stream {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t wakes = 0;
  bool stop = false;
  // The trial list's stream: trials changed (or created) since the last
  // event, by name (bounded by the trials the collector holds).
  std::map<std::string, std::shared_ptr<Trial>> changed;
  // A TrialSubscription or a TrialsSubscription.
  std::shared_ptr<void> subscription;
};

ApiV1::ApiV1(Collector* collector, HttpServer* http, const ApiOptions& options)
    : collector_(collector),
      http_(http),
      options_(options),
      views_(collector, options.cache_bytes) {
  Register();
}

ApiV1::~ApiV1() { StopStreams(); }

void ApiV1::StopStreams() {
  std::set<std::shared_ptr<Stream>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    live = live_;
  }
  for (const auto& s : live) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stop = true;
    s->cv.notify_all();
  }
}

void ApiV1::Register() {
  Collector* const c = collector_;
  // The trial of a request's path, if the caller may see it.
  auto trial_of = [c](const httplib::Request& req,
                      const CallAccess& access) -> absl::StatusOr<std::shared_ptr<Trial>> {
    const std::string name =
        req.matches.size() > 1 ? std::string(req.matches[1]) : req.get_param_value("trial");
    TK_RETURN_IF_ERROR(ValidateTrialName(name));
    TK_RETURN_IF_ERROR(access.CheckTrial(name));
    return c->GetPublishedTrial(name);
  };
  // Runs `fn` (returning a status) and answers its error.
  auto guarded = [](auto fn) {
    return [fn](const httplib::Request& req, const CallAccess& access, httplib::Response& res) {
      const absl::Status status = fn(req, access, res);
      if (!status.ok()) SendError(res, status);
    };
  };

  http_->Get("/api/v1/trials", Role::kRead,
             guarded([c](const httplib::Request&, const CallAccess& access,
                         httplib::Response& res) -> absl::Status {
               JsonWriter j;
               j.BeginObject().Key("trials").BeginArray();
               for (const auto& t : c->Trials()) {
                 if (!access.Sees(t->name()) || t->unpublished()) continue;
                 WriteTrial(j, c->SummaryOf(*t), t->RuleStatuses());
               }
               j.EndArray().EndObject();
               SendJson(res, j);
               return absl::OkStatus();
             }));

  http_->Get(kTrialPath, Role::kRead,
             guarded([c, trial_of](const httplib::Request& req, const CallAccess& access,
                                   httplib::Response& res) -> absl::Status {
               TK_ASSIGN_OR_RETURN(auto trial, trial_of(req, access));
               JsonWriter j;
               j.BeginObject().Key("trial");
               WriteTrial(j, c->SummaryOf(*trial), trial->RuleStatuses());
               j.Key("steps_by_mode").BeginArray();
               for (int mode : trial->Modes()) {
                 TK_ASSIGN_OR_RETURN(auto steps, trial->Steps(mode, false, "", 0, 0));
                 TK_ASSIGN_OR_RETURN(auto all, trial->Steps(mode, true, "", 0, 0));
                 j.BeginObject();
                 j.Key("mode").String(ModeName(mode));
                 j.Key("complete_steps").Uint(steps.size());
                 j.Key("saved_steps").Uint(all.size());
                 j.Key("last_step");
                 if (all.empty()) {
                   j.Null();
                 } else {
                   j.Uint(all.back());
                 }
                 j.EndObject();
               }
               j.EndArray();
               j.Key("collections").BeginArray();
               for (const v1::CollectionInfo& info : trial->CollectionInfos()) {
                 WriteCollection(j, info);
               }
               j.EndArray();
               j.EndObject();
               SendJson(res, j);
               return absl::OkStatus();
             }));

  http_->Get(absl::StrCat(kTrialPath, "/tensors"), Role::kRead,
             guarded([trial_of](const httplib::Request& req, const CallAccess& access,
                                httplib::Response& res) -> absl::Status {
               TK_ASSIGN_OR_RETURN(auto trial, trial_of(req, access));
               TK_ASSIGN_OR_RETURN(int mode, ModeParam(req));
               std::vector<std::string> regex;
               if (req.has_param("regex")) regex.push_back(req.get_param_value("regex"));
               TK_RETURN_IF_ERROR(ValidateRegexes(regex));
               std::optional<uint64_t> step;
               if (req.has_param("step")) {
                 TK_ASSIGN_OR_RETURN(step, UintParam(req, "step", 0, kMaxStep));
               }
               const std::string collection = req.get_param_value("collection");
               TK_ASSIGN_OR_RETURN(auto names, trial->TensorNames(step, mode, regex, collection));
               JsonWriter j;
               j.BeginObject().Key("tensors").BeginArray();
               for (const auto& n : names) j.String(n);
               j.EndArray().EndObject();
               SendJson(res, j);
               return absl::OkStatus();
             }));

  // Reduction series (and scalars: the mean of a one-element tensor is its
  // value).
  TensorViews* views = &views_;
  auto series = [c, views, trial_of](bool scalars) {
    return [=](const httplib::Request& req, const CallAccess& access,
               httplib::Response& res) -> absl::Status {
      TK_ASSIGN_OR_RETURN(auto trial, trial_of(req, access));
      TK_ASSIGN_OR_RETURN(TensorRange range, RangeParams(req));
      const std::string reduction =
          scalars || !req.has_param("reduction") ? "mean" : req.get_param_value("reduction");
      TK_RETURN_IF_ERROR(ValidateReductionName(reduction));
      TK_RETURN_IF_ERROR(ParseReduction(reduction).status());
      const bool abs = !scalars && BoolParam(req, "abs");
      TK_ASSIGN_OR_RETURN(uint64_t points, UintParam(req, "points", 1000, v1::MAX_VIEW_POINTS));
      if (points == 0) return BadParam("points", "must be at least 1");
      std::vector<std::string> workers = {range.worker};
      if (range.worker == "*") workers = trial->Workers();
      JsonWriter j;
      j.BeginObject();
      j.Key("trial").String(trial->name());
      j.Key("tensor").String(range.tensor);
      j.Key("reduction").String(reduction);
      j.Key("abs").Bool(abs);
      j.Key("series").BeginArray();
      for (const std::string& worker : workers) {
        TensorRange r = range;
        r.worker = worker;
        TK_ASSIGN_OR_RETURN(auto values,
                            views->ReductionSeries(*trial, r, reduction, abs, v1::MAX_VIEW_STEPS));
        if (values.empty() && workers.size() > 1) continue;
        const auto buckets = MinMaxEnvelope(values, points);
        j.BeginObject();
        j.Key("worker").String(worker);
        j.Key("total_steps").Uint(values.size());
        j.Key("downsampled").Bool(buckets.size() < values.size());
        WriteEnvelope(j, buckets);
        j.EndObject();
      }
      j.EndArray().EndObject();
      SendJson(res, j);
      return absl::OkStatus();
    };
  };
  http_->Get(absl::StrCat(kTrialPath, "/series"), Role::kRead, guarded(series(false)));
  http_->Get(absl::StrCat(kTrialPath, "/scalars"), Role::kRead, guarded(series(true)));

  http_->Get(absl::StrCat(kTrialPath, "/distributions"), Role::kRead,
             guarded([views, trial_of](const httplib::Request& req, const CallAccess& access,
                                       httplib::Response& res) -> absl::Status {
               TK_ASSIGN_OR_RETURN(auto trial, trial_of(req, access));
               TK_ASSIGN_OR_RETURN(TensorRange range, RangeParams(req));
               TK_ASSIGN_OR_RETURN(uint64_t points,
                                   UintParam(req, "points", 200, v1::MAX_VIEW_POINTS));
               TK_ASSIGN_OR_RETURN(uint64_t bins, UintParam(req, "bins", 30, v1::MAX_VIEW_BINS));
               if (points == 0 || bins == 0)
                 return BadParam(points == 0 ? "points" : "bins", "must be at least 1");
               if (points * bins > 1000000) {
                 return BadParam("bins", absl::StrCat("points x bins is above 1000000"));
               }
               // Each step's distribution: one worker's, or (worker=*) the
               // merge of every worker's values at that step, with its parts
               // kept for the histograms (summed on the shared bins).
               std::vector<std::pair<uint64_t, std::shared_ptr<const StepDistribution>>> steps;
               std::map<uint64_t, std::vector<std::shared_ptr<const StepDistribution>>> parts_of;
               if (range.worker == "*") {
                 const std::vector<std::string> workers = trial->Workers();
                 // The values read stay within MAX_DISTRIBUTION_STEPS in all.
                 const size_t per_worker =
                     v1::MAX_DISTRIBUTION_STEPS / std::max<size_t>(1, workers.size());
                 for (const std::string& worker : workers) {
                   TensorRange r = range;
                   r.worker = worker;
                   auto got = views->Distributions(*trial, r, per_worker);
                   // A worker that never saved the tensor adds nothing (an
                   // error only when no worker did).
                   if (!got.ok() && got.status().code() == absl::StatusCode::kNotFound &&
                       (&worker != &workers.back() || !parts_of.empty())) {
                     continue;
                   }
                   if (!got.ok()) {
                     if (got.status().code() == absl::StatusCode::kInvalidArgument) {
                       return BadParam("worker", absl::StrCat(
                           "every worker's values: ", got.status().message(), " (", workers.size(),
                           " workers share the ", v1::MAX_DISTRIBUTION_STEPS,
                           " step values a request reads, MAX_DISTRIBUTION_STEPS)"));
                     }
                     return got.status();
                   }
                   for (auto& [step, d] : *got) parts_of[step].push_back(std::move(d));
                 }
                 for (const auto& [step, parts] : parts_of) {
                   std::vector<const StepDistribution*> raw;
                   for (const auto& d : parts) raw.push_back(d.get());
                   steps.emplace_back(step, std::make_shared<const StepDistribution>(
                                                MergeStepDistributions(raw)));
                 }
               } else {
                 TK_ASSIGN_OR_RETURN(steps, views->Distributions(*trial, range,
                                                                 v1::MAX_DISTRIBUTION_STEPS));
               }
               // The counts of one step on the shared bins: with several
               // workers, the sum of theirs (an exact merge: the same bins).
               auto rebin = [&](uint64_t step, const StepDistribution& d,
                                const std::vector<double>& edges) {
                 auto it = parts_of.find(step);
                 if (it == parts_of.end()) return Rebin(d, edges);
                 std::vector<double> sum(edges.size() - 1, 0.0);
                 for (const auto& part : it->second) {
                   const std::vector<double> r = Rebin(*part, edges);
                   for (size_t k = 0; k < sum.size(); ++k) sum[k] += r[k];
                 }
                 return sum;
               };
               // Buckets of consecutive steps, as the series' envelope.
               const size_t per = steps.empty() ? 1 : (steps.size() + points - 1) / points;
               // The histograms' shared range: every step's finite min and max.
               double lo = 0, hi = 0;
               bool any = false;
               for (const auto& [step, d] : steps) {
                 if (d->count == 0) continue;
                 lo = any ? std::min(lo, d->min) : d->min;
                 hi = any ? std::max(hi, d->max) : d->max;
                 any = true;
               }
               if (!any) {
                 lo = 0;
                 hi = 1;
               } else if (lo == hi) {
                 lo -= 0.5;
                 hi += 0.5;
               }
               std::vector<double> edges(bins + 1);
               for (size_t i = 0; i <= bins; ++i) edges[i] = lo + (hi - lo) * i / bins;
               edges.back() = hi;

               JsonWriter j;
               j.BeginObject();
               j.Key("trial").String(trial->name());
               j.Key("tensor").String(range.tensor);
               j.Key("worker").String(range.worker);
               j.Key("total_steps").Uint(steps.size());
               j.Key("downsampled").Bool(per > 1);
               j.Key("percentiles").BeginArray();
               for (double p : kPercentiles) j.Number(p);
               j.EndArray();
               j.Key("edges").BeginArray();
               for (double e : edges) j.Number(e);
               j.EndArray();
               std::vector<uint64_t> first, last, count, nans, infs;
               std::vector<std::vector<double>> bands, hists;
               for (size_t b = 0; b < steps.size(); b += per) {
                 const size_t e = std::min(steps.size(), b + per);
                 first.push_back(steps[b].first);
                 last.push_back(steps[e - 1].first);
                 std::vector<double> band(kPercentileCount, std::nan(""));
                 std::vector<double> hist(bins, 0.0);
                 uint64_t n = 0, nan = 0, inf = 0;
                 size_t with_values = 0;
                 std::vector<double> median_sum(1, 0.0);
                 for (size_t i = b; i < e; ++i) {
                   const StepDistribution& d = *steps[i].second;
                   n += d.count;
                   nan += d.nan_count;
                   inf += d.inf_count;
                   const std::vector<double> r = rebin(steps[i].first, d, edges);
                   for (size_t k = 0; k < bins; ++k) hist[k] += r[k] / static_cast<double>(e - b);
                   if (d.count == 0) continue;
                   ++with_values;
                   for (size_t k = 0; k < kPercentileCount; ++k) {
                     const double v = Percentile(d, kPercentiles[k]);
                     if (kPercentiles[k] < 50) {
                       band[k] = with_values == 1 ? v : std::min(band[k], v);
                     } else if (kPercentiles[k] > 50) {
                       band[k] = with_values == 1 ? v : std::max(band[k], v);
                     } else {
                       median_sum[0] += v;
                     }
                   }
                 }
                 for (size_t k = 0; k < kPercentileCount; ++k) {
                   if (kPercentiles[k] == 50 && with_values > 0)
                     band[k] = median_sum[0] / with_values;
                 }
                 count.push_back(n);
                 nans.push_back(nan);
                 infs.push_back(inf);
                 bands.push_back(std::move(band));
                 hists.push_back(std::move(hist));
               }
               auto uints = [&](const char* name, const std::vector<uint64_t>& v) {
                 j.Key(name).BeginArray();
                 for (uint64_t x : v) j.Uint(x);
                 j.EndArray();
               };
               auto rows = [&](const char* name, const std::vector<std::vector<double>>& v) {
                 j.Key(name).BeginArray();
                 for (const auto& row : v) {
                   j.BeginArray();
                   for (double x : row) j.Number(x);
                   j.EndArray();
                 }
                 j.EndArray();
               };
               uints("step", first);
               uints("step_end", last);
               uints("count", count);
               uints("nan_count", nans);
               uints("inf_count", infs);
               rows("bands", bands);
               rows("histograms", hists);
               j.EndObject();
               SendJson(res, j);
               return absl::OkStatus();
             }));

  http_->Get(absl::StrCat(kTrialPath, "/histogram"), Role::kRead,
             guarded([c, trial_of](const httplib::Request& req, const CallAccess& access,
                                   httplib::Response& res) -> absl::Status {
               TK_ASSIGN_OR_RETURN(auto trial, trial_of(req, access));
               v1::HistogramRequest h;
               v1::TensorRequest* t = h.mutable_tensor();
               t->set_trial(trial->name());
               TK_ASSIGN_OR_RETURN(*t->mutable_tensor(), TensorParam(req));
               if (!req.has_param("step")) return BadParam("step", "missing");
               TK_ASSIGN_OR_RETURN(uint64_t step, UintParam(req, "step", 0, kMaxStep));
               t->set_step(step);
               TK_ASSIGN_OR_RETURN(int mode, ModeParam(req));
               t->set_mode(static_cast<v1::Mode>(mode));
               t->set_worker(req.get_param_value("worker"));
               TK_ASSIGN_OR_RETURN(uint64_t bins, UintParam(req, "bins", 30, v1::MAX_VIEW_BINS));
               if (bins == 0) return BadParam("bins", "must be at least 1");
               h.set_bins(static_cast<uint32_t>(bins));
               if (req.has_param("min") || req.has_param("max")) {
                 TK_ASSIGN_OR_RETURN(double lo, DoubleParam(req, "min"));
                 TK_ASSIGN_OR_RETURN(double hi, DoubleParam(req, "max"));
                 h.set_has_range(true);
                 h.set_range_min(lo);
                 h.set_range_max(hi);
               }
               TK_ASSIGN_OR_RETURN(v1::HistogramResponse out, c->Histogram(h));
               JsonWriter j;
               j.BeginObject();
               j.Key("trial").String(trial->name());
               j.Key("tensor").String(t->tensor());
               j.Key("step").Uint(step);
               j.Key("edges").BeginArray();
               for (double e : out.edges()) j.Number(e);
               j.EndArray();
               j.Key("counts").BeginArray();
               for (uint64_t n : out.counts()) j.Uint(n);
               j.EndArray();
               j.Key("nan_count").Uint(out.nan_count());
               j.Key("outside_count").Uint(out.outside_count());
               j.EndObject();
               SendJson(res, j);
               return absl::OkStatus();
             }));

  // Live updates: one trial's (?trial=NAME) or the trial list's (no trial).
  http_->Get("/api/v1/events", Role::kRead,
             guarded([this, c, trial_of](const httplib::Request& req, const CallAccess& access,
                                         httplib::Response& res) -> absl::Status {
               if (!req.has_param("trial")) return ServeTrialList(access, res);
               TK_ASSIGN_OR_RETURN(auto trial, trial_of(req, access));
               auto stream = std::make_shared<Stream>();
               std::weak_ptr<Stream> weak = stream;
               TK_RETURN_IF_ERROR(Open(stream, [&]() -> absl::Status {
                 TK_ASSIGN_OR_RETURN(stream->subscription, trial->Watch([weak] {
                   if (auto s = weak.lock()) {
                     std::lock_guard<std::mutex> l(s->mu);
                     ++s->wakes;
                     s->cv.notify_all();
                   }
                 }));
                 return absl::OkStatus();
               }));
               auto sent_version = std::make_shared<uint64_t>(0);
               Serve(res, stream, [c, trial, sent_version](bool first) {
                 std::string text;
                 const uint64_t version = trial->version();
                 if (first || version != *sent_version) {
                   *sent_version = version;
                   absl::StrAppend(&text, "event: trial\nid: ", version,
                                   "\ndata: ", TrialJson(*c, *trial), "\n\n");
                 }
                 return text;
               });
               return absl::OkStatus();
             }));
}

absl::Status ApiV1::Open(const std::shared_ptr<Stream>& stream,
                         const std::function<absl::Status()>& subscribe) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return absl::UnavailableError("the collector is shutting down");
  if (streams_.load() >= v1::MAX_EVENT_STREAMS) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the collector serves ", v1::MAX_EVENT_STREAMS,
                     " event streams at once (MAX_EVENT_STREAMS): close one (another tab?) "
                     "or retry later"));
  }
  TK_RETURN_IF_ERROR(subscribe());
  ++streams_;
  live_.insert(stream);
  return absl::OkStatus();
}

absl::Status ApiV1::ServeTrialList(const CallAccess& access, httplib::Response& res) {
  Collector* const c = collector_;
  auto stream = std::make_shared<Stream>();
  std::weak_ptr<Stream> weak = stream;
  TK_RETURN_IF_ERROR(Open(stream, [&]() -> absl::Status {
    // Runs on the notifier thread for every trial a commit changed: notes the
    // trial if the caller may see it (a token's prefixes), nothing more.
    TK_ASSIGN_OR_RETURN(stream->subscription,
                        c->notifier()->WatchTrials([weak, access](const std::shared_ptr<Trial>& t) {
                          if (!access.Sees(t->name())) return;
                          if (auto s = weak.lock()) {
                            std::lock_guard<std::mutex> l(s->mu);
                            s->changed[t->name()] = t;
                            ++s->wakes;
                            s->cv.notify_all();
                          }
                        }));
    return absl::OkStatus();
  }));
  // The version of each trial last sent, by name (so a wake that changed
  // nothing shown sends nothing).
  auto sent = std::make_shared<std::map<std::string, uint64_t>>();
  Serve(res, stream, [c, access, stream, sent](bool first) {
    std::string text;
    if (first) {
      // Every trial the caller sees, as /api/v1/trials. A trial changed
      // meanwhile is noted too and sent again only if its version moved.
      JsonWriter j;
      j.BeginObject().Key("trials").BeginArray();
      for (const auto& t : c->Trials()) {
        if (!access.Sees(t->name())) continue;
        (*sent)[t->name()] = t->version();
        WriteTrial(j, c->SummaryOf(*t), t->RuleStatuses());
      }
      j.EndArray().EndObject();
      absl::StrAppend(&text, "event: trials\ndata: ", j.Take(), "\n\n");
    }
    std::map<std::string, std::shared_ptr<Trial>> changed;
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      changed.swap(stream->changed);
    }
    for (const auto& [name, t] : changed) {
      auto it = sent->find(name);
      if (t->deleted()) {
        // Gone (deleted by a user or retention); a trial of the same name
        // made since is a new Trial and notes itself.
        auto now = c->GetTrial(name);
        if (now.ok() && *now != t) continue;
        if (it == sent->end()) continue;
        sent->erase(it);
        JsonWriter j;
        j.BeginObject().Key("name").String(name).EndObject();
        absl::StrAppend(&text, "event: removed\ndata: ", j.Take(), "\n\n");
        continue;
      }
      const uint64_t version = t->version();
      if (it != sent->end() && it->second == version) continue;
      (*sent)[name] = version;
      absl::StrAppend(&text, "event: trial\ndata: ", TrialJson(*c, *t), "\n\n");
    }
    return text;
  });
  return absl::OkStatus();
}

void ApiV1::Serve(httplib::Response& res, const std::shared_ptr<Stream>& stream,
                  std::function<std::string(bool first)> events) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(options_.max_stream_seconds * 1000));
  const auto heartbeat =
      std::chrono::milliseconds(static_cast<int64_t>(options_.heartbeat_seconds * 1000));
  auto seen_wakes = std::make_shared<uint64_t>(0);
  auto first = std::make_shared<bool>(true);
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, stream, deadline, heartbeat, seen_wakes, first, events = std::move(events)](
          size_t, httplib::DataSink& sink) -> bool {
        if (!*first) {
          std::unique_lock<std::mutex> lock(stream->mu);
          stream->cv.wait_for(lock, heartbeat,
                              [&] { return stream->stop || stream->wakes != *seen_wakes; });
          *seen_wakes = stream->wakes;
          if (stream->stop) {
            sink.done();
            return true;
          }
        }
        if (std::chrono::steady_clock::now() > deadline || http_->stopping() ||
            !sink.is_writable()) {
          sink.done();
          return true;
        }
        std::string text = *first ? "retry: 2000\n" : "";
        absl::StrAppend(&text, events(*first));
        *first = false;
        if (text.empty()) text = ": keep-alive\n\n";
        return sink.write(text.data(), text.size());
      },
      [this, stream](bool) {
        stream->subscription.reset();
        std::lock_guard<std::mutex> lock(mu_);
        if (live_.erase(stream) > 0) --streams_;
      });
}

}  // namespace tensorkeep
