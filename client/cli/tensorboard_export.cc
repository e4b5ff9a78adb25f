#include "client/cli/tensorboard_export.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "client/cli/cli_errors.h"
#include "client/cli/collector_wait.h"
#include "client/cli/interrupt.h"
#include "client/step_stream.h"
#include "client/trial.h"
#include "tensor/dtype.h"
#include "tensor/histogram.h"
#include "tensor/reductions.h"
#include "tfrecord/event_file_writer.h"

namespace tensorkeep {
namespace cli {
namespace {

constexpr int kHistogramBins = 30;

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string ReductionTag(const std::string& name, const std::string& reduction, bool abs) {
  return absl::StrCat(name, "/", abs ? "abs_" : "", reduction);
}

// "mean,abs_max,l2" -> specs and their names.
absl::StatusOr<std::vector<ReductionSpec>> ParseReductions(const std::string& text) {
  std::vector<ReductionSpec> specs;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    bool abs = false;
    if (absl::ConsumePrefix(&part, "abs_")) abs = true;
    auto kind = ParseReduction(std::string(part));
    if (!kind.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--reductions: unknown reduction '", part,
          "' (one of min max mean std variance sum prod l1 l2, optionally abs_ first)"));
    }
    specs.push_back({*kind, abs});
  }
  return specs;
}

// TensorBoard's histogram of a value: min, max, count, sum and sum of squares
// of the finite elements, and numpy-style equal-width bins between min and
// max (bucket i ends at bucket_limit[i]).
absl::StatusOr<tfevent::HistogramProto> MakeHistogram(DType dtype, const std::string& data) {
  tfevent::HistogramProto h;
  double mn = INFINITY, mx = -INFINITY, sum = 0, sum_sq = 0, num = 0;
  ForEachAsFloat64(dtype, absl::MakeConstSpan(data.data(), data.size()),
                   [&](const double* v, size_t n) {
                     for (size_t i = 0; i < n; ++i) {
                       if (!std::isfinite(v[i])) continue;
                       mn = std::min(mn, v[i]);
                       mx = std::max(mx, v[i]);
                       sum += v[i];
                       sum_sq += v[i] * v[i];
                       num += 1;
                     }
                   });
  TK_ASSIGN_OR_RETURN(Histogram hist,
                      ComputeHistogram(dtype, absl::MakeConstSpan(data.data(), data.size()),
                                       kHistogramBins, std::nullopt));
  h.set_min(num > 0 ? mn : 0);
  h.set_max(num > 0 ? mx : 0);
  h.set_num(num);
  h.set_sum(sum);
  h.set_sum_squares(sum_sq);
  for (size_t i = 0; i < hist.counts.size(); ++i) {
    h.add_bucket_limit(hist.edges[i + 1]);
    h.add_bucket(static_cast<double>(hist.counts[i]));
  }
  return h;
}

class Exporter {
 public:
  Exporter(client::Trial trial, std::string dir, std::vector<ReductionSpec> reductions)
      : trial_(std::move(trial)), dir_(std::move(dir)), reductions_(std::move(reductions)) {}

  absl::Status ExportStep(uint64_t step) {
    const double wall = Now();
    TK_ASSIGN_OR_RETURN(auto names, trial_.TensorNames(step));
    for (const auto& name : names) {
      client::Tensor tensor = trial_.tensor(name);
      TK_ASSIGN_OR_RETURN(auto workers, tensor.Workers(step));
      for (const auto& worker : workers) {
        TK_ASSIGN_OR_RETURN(auto* out, WriterFor(worker, wall));
        TK_RETURN_IF_ERROR(ExportValue(tensor, step, worker, wall, out));
      }
    }
    for (auto& [worker, w] : writers_) TK_RETURN_IF_ERROR(w->Flush());
    ++steps_;
    return absl::OkStatus();
  }

  absl::Status Close() {
    absl::Status s;
    for (auto& [worker, w] : writers_) s.Update(w->Close());
    return s;
  }

  uint64_t steps() const { return steps_; }
  uint64_t scalars() const { return scalars_; }
  uint64_t histograms() const { return histograms_; }
  size_t runs() const { return writers_.size(); }

 private:
  absl::StatusOr<tfrecord::EventFileWriter*> WriterFor(const std::string& worker, double wall) {
    auto it = writers_.find(worker);
    if (it != writers_.end()) return it->second.get();
    TK_ASSIGN_OR_RETURN(auto w, tfrecord::EventFileWriter::Create(dir_ + "/" + worker, wall));
    return (writers_[worker] = std::move(w)).get();
  }

  absl::Status ExportValue(const client::Tensor& tensor, uint64_t step, const std::string& worker,
                           double wall, tfrecord::EventFileWriter* out) {
    const int64_t s = static_cast<int64_t>(step);
    auto value = tensor.GetValue(step, client::kGlobal, worker);
    if (!value.ok()) {
      if (GetReason(value.status()) != Reason::kTensorUnavailableForStep) return value.status();
      // Only reductions were saved: each is a scalar.
      TK_ASSIGN_OR_RETURN(auto saved, tensor.SavedReductions(step, client::kGlobal, worker));
      for (const auto& [key, v] : saved) {
        TK_RETURN_IF_ERROR(out->WriteScalar(ReductionTag(tensor.name(), key.first, key.second), s,
                                            wall, static_cast<float>(v)));
        ++scalars_;
      }
      return absl::OkStatus();
    }
    const DType dtype = static_cast<DType>(value->dtype);
    const size_t n = value->data.size() / DTypeSize(dtype);
    if (n == 1) {
      double v;
      ConvertToFloat64(dtype, value->data.data(), 1, &v);
      ++scalars_;
      return out->WriteScalar(tensor.name(), s, wall, static_cast<float>(v));
    }
    if (n == 0) return absl::OkStatus();
    if (!reductions_.empty()) {
      TK_ASSIGN_OR_RETURN(
          auto values,
          ComputeReductions(dtype, absl::MakeConstSpan(value->data.data(), value->data.size()),
                            reductions_));
      for (size_t i = 0; i < reductions_.size(); ++i) {
        TK_RETURN_IF_ERROR(out->WriteScalar(
            ReductionTag(tensor.name(), std::string(ReductionName(reductions_[i].kind)),
                         reductions_[i].abs),
            s, wall, static_cast<float>(values[i])));
        ++scalars_;
      }
    }
    TK_ASSIGN_OR_RETURN(auto hist, MakeHistogram(dtype, value->data));
    ++histograms_;
    return out->WriteHistogram(tensor.name(), s, wall, hist);
  }

  client::Trial trial_;
  std::string dir_;
  std::vector<ReductionSpec> reductions_;
  std::map<std::string, std::unique_ptr<tfrecord::EventFileWriter>> writers_;
  uint64_t steps_ = 0, scalars_ = 0, histograms_ = 0;
};

}  // namespace

int ExportTensorboard(const Args& args, const std::shared_ptr<Connection>& connection) {
  if (args.positional().size() != 2) return UsageError("export-tensorboard needs TRIAL DIR");
  const std::string& trial_name = args.positional()[0];
  auto reductions = ParseReductions(args.Get("reductions").value_or("mean,std"));
  if (!reductions.ok()) return UsageError(std::string(reductions.status().message()));
  if (absl::Status up = WaitForCollector(*connection); !up.ok()) return Fail(up);
  client::Trial trial(connection, trial_name);
  // Without --follow a trial that does not exist is an error at once, not an
  // empty export; with it, the exporter may start before the training job's
  // first write (the PyTorch hook starts it so) and waits for the trial.
  if (!args.Has("follow")) {
    auto summary = trial.Summary();
    if (!summary.ok()) return Fail(summary.status());
  }
  Exporter exporter(trial, args.positional()[1], *reductions);

  absl::Status s;
  bool interrupted = false;
  if (!args.Has("follow")) {
    auto steps = trial.Steps();
    if (!steps.ok()) return Fail(steps.status());
    for (uint64_t step : *steps) {
      s = exporter.ExportStep(step);
      if (!s.ok()) break;
    }
  } else {
    // The complete steps as they complete, waiting for a trial the training
    // job has not written yet, reconnecting across collector restarts.
    client::StepStreamOptions options;
    options.reconnect_timeout = absl::Seconds(300);
    options.on_waiting_for_trial = [&] {
      std::cerr << "tensorkeep: waiting for trial " << trial_name << " to appear on "
                << connection->address() << " (Ctrl-C to stop)" << std::endl;
    };
    std::unique_ptr<client::StepStream> stream =
        client::StepStream::Start(connection, trial_name, options);
    Interrupt interrupt([&] { stream->Cancel(); });
    while (true) {
      absl::StatusOr<std::optional<v1::StepEvent>> event = stream->Next();
      if (!event.ok()) {
        if (!interrupt.interrupted()) s = event.status();
        break;
      }
      if (!event->has_value()) continue;
      if ((*event)->end_of_trial()) break;
      s = exporter.ExportStep((*event)->step());
      if (!s.ok()) break;
      std::cout << "step " << (*event)->step() << " exported" << std::endl;
    }
    interrupted = interrupt.interrupted();
  }
  absl::Status closed = exporter.Close();
  if (s.ok()) s = closed;
  if (!s.ok()) return Fail(s);
  std::cout << (interrupted ? "interrupted: " : "") << "exported " << exporter.steps()
            << " steps of trial " << trial_name << " to " << args.positional()[1] << " ("
            << exporter.runs() << " runs, " << exporter.scalars() << " scalars, "
            << exporter.histograms() << " histograms)" << std::endl;
  return 0;
}

}  // namespace cli
}  // namespace tensorkeep
