#include "client/trial.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace client {
namespace {

// Makes one unary call and maps its status.
template <typename Req, typename Resp, typename Method>
absl::StatusOr<Resp> Call(const Connection& c, Method method, const Req& request,
                          double timeout_seconds = 0) {
  grpc::ClientContext context;
  c.Prepare(&context);
  if (timeout_seconds > 0) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  }
  Resp response;
  grpc::Status s = (c.stub()->*method)(&context, request, &response);
  TK_RETURN_IF_ERROR(FromGrpc(s, &context, c));
  return response;
}

v1::TrialRef Ref(const std::string& trial) {
  v1::TrialRef r;
  r.set_trial(trial);
  return r;
}

}  // namespace

absl::StatusOr<int> ParseMode(const std::string& text) {
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  if (upper == "TRAIN" || upper == "1") return kTrain;
  if (upper == "EVAL" || upper == "2") return kEval;
  if (upper == "PREDICT" || upper == "3") return kPredict;
  if (upper == "GLOBAL" || upper == "4") return kGlobal;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode '", text, "': use TRAIN, EVAL, PREDICT or GLOBAL"));
}

std::string ModeText(int mode) {
  switch (mode) {
    case kTrain:
      return "TRAIN";
    case kEval:
      return "EVAL";
    case kPredict:
      return "PREDICT";
    default:
      return "GLOBAL";
  }
}

Trial::Trial(std::shared_ptr<Connection> connection, std::string name)
    : connection_(std::move(connection)), name_(std::move(name)) {}

absl::StatusOr<v1::TrialSummary> Trial::Summary() const {
  return Call<v1::TrialRef, v1::TrialSummary>(*connection_, &v1::TensorKeep::Stub::GetTrial,
                                              Ref(name_));
}

absl::StatusOr<std::vector<uint64_t>> Trial::Steps(int mode, bool show_incomplete_steps) const {
  v1::ListStepsRequest r;
  r.set_trial(name_);
  r.set_mode(static_cast<v1::Mode>(mode));
  r.set_show_incomplete_steps(show_incomplete_steps);
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::ListStepsRequest, v1::StepList>(
                                     *connection_, &v1::TensorKeep::Stub::ListSteps, r)));
  return std::vector<uint64_t>(resp.steps().begin(), resp.steps().end());
}

absl::StatusOr<std::vector<std::string>> Trial::TensorNames(std::optional<uint64_t> step, int mode,
                                                            const std::vector<std::string>& regex,
                                                            const std::string& collection) const {
  v1::ListTensorNamesRequest r;
  r.set_trial(name_);
  if (step.has_value()) {
    r.set_has_step(true);
    r.set_step(*step);
  }
  r.set_mode(static_cast<v1::Mode>(mode));
  for (const auto& x : regex) r.add_regex(x);
  r.set_collection(collection);
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::ListTensorNamesRequest, v1::NameList>(
                                     *connection_, &v1::TensorKeep::Stub::ListTensorNames, r)));
  return std::vector<std::string>(resp.names().begin(), resp.names().end());
}

absl::StatusOr<bool> Trial::HasTensor(const std::string& name) const {
  TK_ASSIGN_OR_RETURN(auto names, TensorNames());
  return std::find(names.begin(), names.end(), name) != names.end();
}

Tensor Trial::tensor(const std::string& name) const { return Tensor(connection_, name_, name); }

absl::StatusOr<std::vector<int>> Trial::Modes() const {
  TK_ASSIGN_OR_RETURN(auto s, Summary());
  return std::vector<int>(s.modes().begin(), s.modes().end());
}

absl::StatusOr<int> Trial::ModeOf(uint64_t global_step) const {
  v1::StepMappingRequest r;
  r.set_trial(name_);
  r.set_step(global_step);
  TK_ASSIGN_OR_RETURN(auto m, (Call<v1::StepMappingRequest, v1::StepMapping>(
                                  *connection_, &v1::TensorKeep::Stub::MapStep, r)));
  return static_cast<int>(m.mode());
}

absl::StatusOr<uint64_t> Trial::ModeStep(uint64_t global_step) const {
  v1::StepMappingRequest r;
  r.set_trial(name_);
  r.set_step(global_step);
  TK_ASSIGN_OR_RETURN(auto m, (Call<v1::StepMappingRequest, v1::StepMapping>(
                                  *connection_, &v1::TensorKeep::Stub::MapStep, r)));
  return m.mode_step();
}

absl::StatusOr<uint64_t> Trial::GlobalStep(int mode, uint64_t mode_step) const {
  v1::StepMappingRequest r;
  r.set_trial(name_);
  r.set_mode(static_cast<v1::Mode>(mode));
  r.set_step(mode_step);
  TK_ASSIGN_OR_RETURN(auto m, (Call<v1::StepMappingRequest, v1::StepMapping>(
                                  *connection_, &v1::TensorKeep::Stub::MapStep, r)));
  return m.global_step();
}

absl::StatusOr<std::vector<std::string>> Trial::Workers() const {
  TK_ASSIGN_OR_RETURN(auto w, (Call<v1::TrialRef, v1::WorkerList>(
                                  *connection_, &v1::TensorKeep::Stub::ListWorkers, Ref(name_))));
  return std::vector<std::string>(w.workers().begin(), w.workers().end());
}

absl::StatusOr<std::vector<v1::WorkerStatus>> Trial::WorkerStatuses() const {
  TK_ASSIGN_OR_RETURN(auto w, (Call<v1::TrialRef, v1::WorkerList>(
                                  *connection_, &v1::TensorKeep::Stub::ListWorkers, Ref(name_))));
  return std::vector<v1::WorkerStatus>(w.statuses().begin(), w.statuses().end());
}

absl::StatusOr<v1::WorkerStatus> Trial::DeclareWorkerLost(const std::string& worker) const {
  v1::DeclareWorkerLostRequest r;
  r.set_trial(name_);
  r.set_worker(worker);
  return Call<v1::DeclareWorkerLostRequest, v1::WorkerStatus>(
      *connection_, &v1::TensorKeep::Stub::DeclareWorkerLost, r);
}

absl::StatusOr<std::map<std::string, std::vector<std::string>>> Trial::Collections() const {
  TK_ASSIGN_OR_RETURN(auto c, (Call<v1::TrialRef, v1::CollectionsResponse>(
                                  *connection_, &v1::TensorKeep::Stub::ListCollections,
                                  Ref(name_))));
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& info : c.collections()) {
    out[info.name()] = std::vector<std::string>(info.tensor_names().begin(),
                                                info.tensor_names().end());
  }
  return out;
}

absl::StatusOr<std::vector<v1::CollectionInfo>> Trial::CollectionInfos() const {
  TK_ASSIGN_OR_RETURN(auto c, (Call<v1::TrialRef, v1::CollectionsResponse>(
                                  *connection_, &v1::TensorKeep::Stub::ListCollections,
                                  Ref(name_))));
  return std::vector<v1::CollectionInfo>(c.collections().begin(), c.collections().end());
}

absl::StatusOr<uint32_t> Trial::PutCollections(
    const std::string& worker, const std::vector<v1::CollectionConfig>& collections) const {
  v1::PutCollectionsRequest r;
  r.set_trial(name_);
  r.set_worker(worker);
  for (const auto& c : collections) *r.add_collections() = c;
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::PutCollectionsRequest, v1::PutCollectionsResponse>(
                                     *connection_, &v1::TensorKeep::Stub::PutCollections, r)));
  return resp.collections();
}

absl::StatusOr<StepState> Trial::HasPassedStep(uint64_t step, int mode) const {
  v1::HasPassedStepRequest r;
  r.set_trial(name_);
  r.set_step(step);
  r.set_mode(static_cast<v1::Mode>(mode));
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::HasPassedStepRequest, v1::HasPassedStepResponse>(
                                     *connection_, &v1::TensorKeep::Stub::HasPassedStep, r)));
  return static_cast<StepState>(resp.state());
}

absl::Status Trial::WaitForSteps(const std::vector<uint64_t>& steps, int mode,
                                 double timeout_seconds) const {
  v1::WaitForStepsRequest r;
  r.set_trial(name_);
  for (uint64_t s : steps) r.add_steps(s);
  r.set_mode(static_cast<v1::Mode>(mode));
  r.set_timeout_seconds(timeout_seconds);
  return Call<v1::WaitForStepsRequest, v1::WaitForStepsResponse>(
             *connection_, &v1::TensorKeep::Stub::WaitForSteps, r,
             timeout_seconds > 0 ? timeout_seconds + 5 : 0)
      .status();
}

absl::StatusOr<bool> Trial::End() const {
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::TrialRef, v1::EndTrialResponse>(
                                     *connection_, &v1::TensorKeep::Stub::EndTrial, Ref(name_))));
  return resp.was_running();
}

absl::StatusOr<v1::TrialSummary> Trial::Publish() const {
  return Call<v1::TrialRef, v1::TrialSummary>(*connection_, &v1::TensorKeep::Stub::PublishTrial,
                                              Ref(name_));
}

absl::StatusOr<v1::DeleteTrialResponse> Trial::Delete(bool wait_reclaimed) const {
  v1::DeleteTrialRequest r;
  r.set_trial(name_);
  r.set_wait_reclaimed(wait_reclaimed);
  return Call<v1::DeleteTrialRequest, v1::DeleteTrialResponse>(
      *connection_, &v1::TensorKeep::Stub::DeleteTrial, r);
}

absl::StatusOr<std::vector<v1::RuleStatus>> Trial::RuleStatuses() const {
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::TrialRef, v1::RuleStatusList>(
                                     *connection_, &v1::TensorKeep::Stub::ListRuleStatuses,
                                     Ref(name_))));
  return std::vector<v1::RuleStatus>(resp.statuses().begin(), resp.statuses().end());
}

absl::Status Trial::ReportRuleStatus(const v1::RuleStatus& status) const {
  v1::RuleStatus s = status;
  s.set_trial(name_);
  return Call<v1::RuleStatus, v1::RuleStatus>(*connection_,
                                              &v1::TensorKeep::Stub::ReportRuleStatus, s)
      .status();
}

// ---------------------------------------------------------------- Tensor

Tensor::Tensor(std::shared_ptr<Connection> connection, std::string trial, std::string name)
    : connection_(std::move(connection)), trial_(std::move(trial)), name_(std::move(name)) {}

void Tensor::Address(uint64_t step, int mode, const std::string& worker,
                     v1::TensorRequest* request) const {
  request->set_trial(trial_);
  request->set_tensor(name_);
  request->set_step(step);
  request->set_mode(static_cast<v1::Mode>(mode));
  request->set_worker(worker);
}

absl::StatusOr<std::vector<uint64_t>> Tensor::Steps(int mode, bool show_incomplete_steps) const {
  v1::ListStepsRequest r;
  r.set_trial(trial_);
  r.set_tensor(name_);
  r.set_mode(static_cast<v1::Mode>(mode));
  r.set_show_incomplete_steps(show_incomplete_steps);
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::ListStepsRequest, v1::StepList>(
                                     *connection_, &v1::TensorKeep::Stub::ListSteps, r)));
  return std::vector<uint64_t>(resp.steps().begin(), resp.steps().end());
}

namespace {

// A value from the header (and first bytes) of a streamed one; moves the bytes.
Value TakeValue(v1::TensorValue& m) {
  Value v;
  v.step = m.step();
  v.mode = m.mode();
  v.mode_step = m.mode_step();
  v.worker = m.worker();
  v.dtype = m.dtype();
  v.shape.assign(m.shape().begin(), m.shape().end());
  v.data = std::move(*m.mutable_data());
  return v;
}

}  // namespace

absl::StatusOr<std::vector<Value>> Tensor::ReadValues(
    const std::function<std::unique_ptr<grpc::ClientReader<v1::TensorValue>>(grpc::ClientContext*)>&
        call) const {
  grpc::ClientContext context;
  connection_->Prepare(&context);
  auto reader = call(&context);
  std::vector<Value> out;
  std::vector<Value> batched;
  v1::TensorValue msg;
  uint64_t expected = 0;
  while (reader->Read(&msg)) {
    // Further small values may be packed into the same message.
    for (auto& b : *msg.mutable_batched()) batched.push_back(TakeValue(b));
    if (msg.header()) {
      Value v = TakeValue(msg);
      expected = msg.value_size();
      if (v.data.size() < expected) v.data.reserve(expected);
      out.push_back(std::move(v));
    } else if (!out.empty()) {
      out.back().data.append(msg.data());
    }
    for (auto& v : batched) out.push_back(std::move(v));
    batched.clear();
  }
  TK_RETURN_IF_ERROR(FromGrpc(reader->Finish(), &context, *connection_));
  if (!out.empty() && out.back().data.size() != expected) {
    return absl::DataLossError("a value arrived truncated");
  }
  return out;
}

absl::StatusOr<Value> Tensor::GetValue(uint64_t step, int mode, const std::string& worker) const {
  v1::TensorRequest r;
  Address(step, mode, worker, &r);
  TK_ASSIGN_OR_RETURN(auto values, ReadValues([&](grpc::ClientContext* ctx) {
                        return connection_->stub()->GetValue(ctx, r);
                      }));
  if (values.size() != 1) return absl::InternalError("expected exactly one value");
  return std::move(values[0]);
}

absl::StatusOr<std::map<uint64_t, Value>> Tensor::Values(int mode, const std::string& worker) const {
  v1::TensorValuesRequest r;
  r.set_trial(trial_);
  r.set_tensor(name_);
  r.set_mode(static_cast<v1::Mode>(mode));
  r.set_worker(worker);
  TK_ASSIGN_OR_RETURN(auto values, ReadValues([&](grpc::ClientContext* ctx) {
                        return connection_->stub()->GetValues(ctx, r);
                      }));
  std::map<uint64_t, Value> out;
  const bool global = mode == kGlobal || mode == 0;
  for (auto& v : values) {
    const uint64_t key = global ? v.step : v.mode_step;
    out.emplace(key, std::move(v));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Tensor::Workers(uint64_t step, int mode) const {
  v1::TensorWorkersRequest r;
  r.set_trial(trial_);
  r.set_tensor(name_);
  r.set_step(step);
  r.set_mode(static_cast<v1::Mode>(mode));
  TK_ASSIGN_OR_RETURN(auto w, (Call<v1::TensorWorkersRequest, v1::WorkerList>(
                                  *connection_, &v1::TensorKeep::Stub::TensorWorkers, r)));
  return std::vector<std::string>(w.workers().begin(), w.workers().end());
}

absl::StatusOr<std::vector<uint64_t>> Tensor::PrevSteps(uint64_t step, uint32_t n, int mode) const {
  v1::PrevStepsRequest r;
  r.set_trial(trial_);
  r.set_tensor(name_);
  r.set_step(step);
  r.set_n(n);
  r.set_mode(static_cast<v1::Mode>(mode));
  TK_ASSIGN_OR_RETURN(auto s, (Call<v1::PrevStepsRequest, v1::StepList>(
                                  *connection_, &v1::TensorKeep::Stub::PrevSteps, r)));
  return std::vector<uint64_t>(s.steps().begin(), s.steps().end());
}

absl::StatusOr<double> Tensor::ReductionValue(uint64_t step, const std::string& reduction, int mode,
                                              const std::string& worker, bool abs) const {
  TK_ASSIGN_OR_RETURN(auto values, ReductionValues(step, {{reduction, abs}}, mode, worker));
  return values[0];
}

absl::StatusOr<std::vector<double>> Tensor::ReductionValues(
    uint64_t step, const std::vector<std::pair<std::string, bool>>& reductions, int mode,
    const std::string& worker) const {
  v1::ReductionsRequest r;
  Address(step, mode, worker, r.mutable_tensor());
  for (const auto& [name, abs] : reductions) {
    v1::ReductionSpec* s = r.add_reductions();
    s->set_name(name);
    s->set_abs(abs);
  }
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::ReductionsRequest, v1::ReductionsResponse>(
                                     *connection_, &v1::TensorKeep::Stub::GetReductions, r)));
  std::vector<double> out;
  for (const auto& red : resp.reductions()) out.push_back(red.value());
  return out;
}

absl::StatusOr<std::map<std::pair<std::string, bool>, double>> Tensor::SavedReductions(
    uint64_t step, int mode, const std::string& worker) const {
  v1::ReductionsRequest r;
  Address(step, mode, worker, r.mutable_tensor());
  r.set_saved_only(true);
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::ReductionsRequest, v1::ReductionsResponse>(
                                     *connection_, &v1::TensorKeep::Stub::GetReductions, r)));
  std::map<std::pair<std::string, bool>, double> out;
  for (const auto& red : resp.reductions()) out[{red.name(), red.abs()}] = red.value();
  return out;
}

absl::StatusOr<Histogram> Tensor::GetHistogram(uint64_t step, int bins,
                                               std::optional<std::pair<double, double>> range,
                                               int mode, const std::string& worker) const {
  v1::HistogramRequest r;
  Address(step, mode, worker, r.mutable_tensor());
  r.set_bins(bins);
  if (range.has_value()) {
    r.set_has_range(true);
    r.set_range_min(range->first);
    r.set_range_max(range->second);
  }
  TK_ASSIGN_OR_RETURN(auto resp, (Call<v1::HistogramRequest, v1::HistogramResponse>(
                                     *connection_, &v1::TensorKeep::Stub::GetHistogram, r)));
  Histogram h;
  h.edges.assign(resp.edges().begin(), resp.edges().end());
  h.counts.assign(resp.counts().begin(), resp.counts().end());
  h.nan_count = resp.nan_count();
  h.outside_count = resp.outside_count();
  return h;
}

}  // namespace client
}  // namespace tensorkeep
