#include "client/cli/trial_walk.h"

#include <openssl/evp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/errors.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace cli {
namespace {

// SHA-256 over length-prefixed fields, so that no two different sequences of
// fields hash the same bytes.
class Hasher {
 public:
  Hasher() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
  }
  Hasher& Str(std::string_view s) {
    U64(s.size());
    EVP_DigestUpdate(ctx_.get(), s.data(), s.size());
    return *this;
  }
  Hasher& U64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    EVP_DigestUpdate(ctx_.get(), b, sizeof(b));
    return *this;
  }
  Hasher& I64(int64_t v) { return U64(static_cast<uint64_t>(v)); }
  Hasher& F64(double v) {
    uint64_t bits;
    static_assert(sizeof(bits) == sizeof(v));
    std::memcpy(&bits, &v, sizeof(v));
    return U64(bits);
  }
  std::string Hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &n);
    std::string out;
    for (unsigned int i = 0; i < n; ++i) absl::StrAppendFormat(&out, "%02x", md[i]);
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

std::string Sha256Hex(std::string_view bytes) {
  Hasher h;
  h.Str(bytes);
  return h.Hex();
}

std::string Bytes(uint64_t n) {
  if (n < 1024) return absl::StrCat(n, " B");
  if (n < (1u << 20)) return absl::StrFormat("%.1f KiB", n / 1024.0);
  if (n < (1u << 30)) return absl::StrFormat("%.1f MiB", n / 1048576.0);
  return absl::StrFormat("%.2f GiB", n / 1073741824.0);
}

}  // namespace

std::string TrialFingerprint::Describe() const {
  return absl::StrCat(steps, " steps, ", records, " records (", values, " values, ",
                      Bytes(value_bytes), "), ", rules, " rule statuses, sha256 ",
                      sha256.substr(0, 16));
}

absl::StatusOr<TrialFingerprint> WalkTrial(const client::Trial& trial, TrialContents* contents,
                                           const RecordSink& on_record) {
  TrialFingerprint fp;
  Hasher h;
  TK_ASSIGN_OR_RETURN(v1::TrialSummary summary, trial.Summary());
  // Workers by name (their statuses follow `workers`' order).
  std::vector<std::pair<std::string, v1::WorkerStatus>> workers;
  for (int i = 0; i < summary.workers_size(); ++i) {
    v1::WorkerStatus s;
    if (i < summary.worker_statuses_size()) s = summary.worker_statuses(i);
    workers.emplace_back(summary.workers(i), s);
  }
  std::sort(workers.begin(), workers.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  summary.clear_workers();
  summary.clear_worker_statuses();
  for (const auto& [name, status] : workers) {
    summary.add_workers(name);
    *summary.add_worker_statuses() = status;
  }
  h.Str("summary").U64(summary.num_workers()).U64(summary.ended()).U64(summary.num_steps());
  h.I64(summary.last_step()).I64(summary.complete_through()).U64(summary.num_tensors());
  h.U64(summary.stop_requested()).Str(summary.stop_reason());
  for (int m : summary.modes()) h.I64(m);
  for (const auto& [name, s] : workers) {
    h.Str(name).I64(s.state()).I64(s.last_step()).I64(s.committed_through());
  }

  TK_ASSIGN_OR_RETURN(auto collections, trial.Collections());
  std::map<std::string, std::vector<std::string>> collections_of;  // tensor -> collections
  h.Str("collections").U64(collections.size());
  for (const auto& [collection, names] : collections) {
    std::set<std::string> sorted(names.begin(), names.end());
    h.Str(collection).U64(sorted.size());
    for (const auto& n : sorted) {
      h.Str(n);
      collections_of[n].push_back(collection);
    }
  }

  TK_ASSIGN_OR_RETURN(auto rules, trial.RuleStatuses());
  std::sort(rules.begin(), rules.end(),
            [](const v1::RuleStatus& a, const v1::RuleStatus& b) { return a.rule() < b.rule(); });
  h.Str("rules").U64(rules.size());
  for (const auto& r : rules) {
    h.Str(r.rule()).I64(r.state()).I64(r.step()).Str(r.message()).Str(r.action());
    h.I64(r.last_evaluated_step());
  }
  fp.rules = rules.size();

  TK_ASSIGN_OR_RETURN(auto steps, trial.Steps(client::kGlobal, /*show_incomplete_steps=*/true));
  fp.steps = steps.size();
  h.Str("steps").U64(steps.size());
  for (uint64_t step : steps) {
    TK_ASSIGN_OR_RETURN(int mode, trial.ModeOf(step));
    TK_ASSIGN_OR_RETURN(uint64_t mode_step, trial.ModeStep(step));
    h.U64(step).I64(mode).U64(mode_step);
    TK_ASSIGN_OR_RETURN(auto names, trial.TensorNames(step));
    std::sort(names.begin(), names.end());
    h.U64(names.size());
    for (const auto& name : names) {
      client::Tensor tensor = trial.tensor(name);
      TK_ASSIGN_OR_RETURN(auto saved_by, tensor.Workers(step));
      std::sort(saved_by.begin(), saved_by.end());
      h.Str(name).U64(saved_by.size());
      for (const auto& w : saved_by) {
        v1::TensorRecord record;
        record.set_name(name);
        record.set_step(step);
        record.set_mode(static_cast<v1::Mode>(mode));
        record.set_mode_step(mode_step);
        auto value = tensor.GetValue(step, client::kGlobal, w);
        h.Str(w);
        if (value.ok()) {
          h.U64(1).I64(value->dtype).U64(value->shape.size());
          for (int64_t d : value->shape) h.I64(d);
          h.U64(value->data.size()).Str(Sha256Hex(value->data));
          ++fp.values;
          fp.value_bytes += value->data.size();
          record.set_has_value(true);
          record.set_dtype(static_cast<v1::DType>(value->dtype));
          for (int64_t d : value->shape) record.add_shape(d);
          record.set_value_size(value->data.size());
          record.set_data(std::move(value->data));
        } else if (GetReason(value.status()) == Reason::kTensorUnavailableForStep) {
          h.U64(0);  // only reductions were saved
        } else {
          return value.status();
        }
        TK_ASSIGN_OR_RETURN(auto reductions, tensor.SavedReductions(step, client::kGlobal, w));
        h.U64(reductions.size());
        for (const auto& [key, v] : reductions) {
          h.Str(key.first).U64(key.second).F64(v);
          auto* r = record.add_reductions();
          r->set_name(key.first);
          r->set_abs(key.second);
          r->set_value(v);
        }
        if (auto c = collections_of.find(name); c != collections_of.end()) {
          for (const auto& collection : c->second) record.add_collections(collection);
        }
        ++fp.records;
        if (on_record) TK_RETURN_IF_ERROR(on_record(w, std::move(record)));
      }
    }
  }
  h.Str("end").U64(fp.records).U64(fp.values).U64(fp.value_bytes);
  fp.sha256 = h.Hex();
  if (contents != nullptr) {
    contents->summary = std::move(summary);
    contents->rules = std::move(rules);
  }
  return fp;
}

}  // namespace cli
}  // namespace tensorkeep
