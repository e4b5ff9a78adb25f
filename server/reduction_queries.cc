// Collector::Reductions and Collector::Histogram: server-side reductions and
// histograms of saved values (run on the executor, reading through the value
// cache).
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

}  // namespace tensorkeep
