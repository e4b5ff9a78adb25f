#include "server/tensorkeep_service.h"

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "base/unpublished.h"
#include "server/grpc_status.h"
#include "server/push_reactor.h"
#include "server/stream_reactors.h"
#include "server/validation.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace {

// Runs `fn` (returning absl::Status); nothing should throw, but if something
// does, the call fails, not the server.
template <typename Fn>
absl::Status RunGuarded(Fn& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("internal error: ", e.what()));
  }
}

// Runs `fn` (cheap: in-memory index lookups) and finishes the call with its
// status.
template <typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, Fn fn) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(RunGuarded(fn), context));
  return reactor;
}

// Runs `fn` on the executor, never on gRPC's thread, and finishes the call
// from there. `fn` outlives this handler: it captures by value (the request
// and response stay valid until the call is finished).
template <typename Fn>
grpc::ServerUnaryReactor* Offload(grpc::CallbackServerContext* context, Executor* executor, Fn fn) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status queued = executor->Schedule([context, reactor, fn = std::move(fn)]() mutable {
    reactor->Finish(ToGrpcStatus(RunGuarded(fn), context));
  });
  if (!queued.ok()) reactor->Finish(ToGrpcStatus(queued, context));
  return reactor;
}

template <typename T>
void AddAll(const std::vector<T>& from, google::protobuf::RepeatedField<T>* to) {
  to->Add(from.begin(), from.end());
}

void AddAll(const std::vector<std::string>& from,
            google::protobuf::RepeatedPtrField<std::string>* to) {
  for (const auto& s : from) to->Add()->assign(s);
}

// A server stream that fails at once (its request was bad).
template <typename T>
class FailedWriteReactor : public grpc::ServerWriteReactor<T> {
 public:
  FailedWriteReactor(grpc::CallbackServerContext* context, const absl::Status& status) {
    this->Finish(ToGrpcStatus(status, context));
  }
  void OnDone() override { delete this; }
};

// A Push stream refused while the server shuts down.
class RefusedPushReactor : public grpc::ServerBidiReactor<v1::PushRequest, v1::PushResponse> {
 public:
  RefusedPushReactor() {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the collector is shutting down; retry against its replacement"));
  }
  void OnDone() override { delete this; }
};

}  // namespace

CallAccess TensorKeepService::Access(grpc::CallbackServerContext* context) const {
  return access_ == nullptr ? CallAccess::Everything("anonymous") : access_->ForCall(*context);
}

absl::Status TensorKeepService::CheckTrial(grpc::CallbackServerContext* context,
                                           const std::string& trial) const {
  return access_ == nullptr ? absl::OkStatus() : access_->ForCall(*context).CheckTrial(trial);
}

namespace {

// The call carries "tk-unpublished: 1": it sees unpublished trials
// (proto/tensorkeep.proto, Open.unpublished).
bool SeesUnpublished(const grpc::CallbackServerContext* context) {
  const auto& md = context->client_metadata();
  auto it = md.find(kUnpublishedMetadata);
  return it != md.end() && it->second == "1";
}

}  // namespace

absl::StatusOr<std::shared_ptr<Trial>> TensorKeepService::TrialFor(
    grpc::CallbackServerContext* context, const std::string& trial) const {
  TK_RETURN_IF_ERROR(CheckTrial(context, trial));
  return collector_->GetPublishedTrial(trial, SeesUnpublished(context));
}

grpc::ServerBidiReactor<v1::PushRequest, v1::PushResponse>* TensorKeepService::Push(
    grpc::CallbackServerContext* context) {
  if (draining_.load()) return new RefusedPushReactor();
  return new PushReactor(context, collector_, &pushes_, Access(context));
}

grpc::ServerUnaryReactor* TensorKeepService::ListTrials(grpc::CallbackServerContext* context,
                                                        const v1::ListTrialsRequest*,
                                                        v1::ListTrialsResponse* response) {
  return Unary(context, [&]() -> absl::Status {
    const CallAccess access = Access(context);
    const bool unpublished = SeesUnpublished(context);
    for (const auto& t : collector_->Trials()) {
      if (!access.Sees(t->name()) || (t->unpublished() && !unpublished)) continue;
      *response->add_trials() = collector_->SummaryOf(*t);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::GetTrial(grpc::CallbackServerContext* context,
                                                      const v1::TrialRef* request,
                                                      v1::TrialSummary* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    *response = collector_->SummaryOf(*trial);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::EndTrial(grpc::CallbackServerContext* context,
                                                      const v1::TrialRef* request,
                                                      v1::EndTrialResponse* response) {
  // Finished from the committer's completion: no thread waits for the disk.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const CallAccess access = Access(context);
  if (absl::Status allowed = access.CheckTrial(request->trial()); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed, context));
    return reactor;
  }
  spdlog::info("{} ({}) ends trial '{}'", access.who(), context->peer(), request->trial());
  collector_->EndTrial(request->trial(),
                       [context, reactor, response](absl::StatusOr<bool> was_running) {
                         if (was_running.ok()) response->set_was_running(*was_running);
                         reactor->Finish(ToGrpcStatus(was_running.status(), context));
                       });
  return reactor;
}

grpc::ServerUnaryReactor* TensorKeepService::DeleteTrial(grpc::CallbackServerContext* context,
                                                         const v1::DeleteTrialRequest* request,
                                                         v1::DeleteTrialResponse* response) {
  // Finished from the committer's (or, waiting for the space, the
  // reclaimer's) completion, as EndTrial.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const CallAccess access = Access(context);
  if (absl::Status allowed = access.CheckTrial(request->trial()); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed, context));
    return reactor;
  }
  spdlog::info("{} ({}) deletes trial '{}'", access.who(), context->peer(), request->trial());
  collector_->DeleteTrial(
      request->trial(), access.who(), request->wait_reclaimed(),
      [context, reactor, response](absl::StatusOr<v1::DeleteTrialResponse> deleted) {
        if (deleted.ok()) *response = std::move(*deleted);
        reactor->Finish(ToGrpcStatus(deleted.status(), context));
      });
  return reactor;
}

grpc::ServerUnaryReactor* TensorKeepService::PublishTrial(grpc::CallbackServerContext* context,
                                                          const v1::TrialRef* request,
                                                          v1::TrialSummary* response) {
  // Finished from the committer's completion, as EndTrial.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const CallAccess access = Access(context);
  if (absl::Status allowed = access.CheckTrial(request->trial()); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed, context));
    return reactor;
  }
  spdlog::info("{} ({}) publishes trial '{}'", access.who(), context->peer(), request->trial());
  collector_->PublishTrial(request->trial(),
                           [context, reactor, response](absl::StatusOr<v1::TrialSummary> summary) {
                             if (summary.ok()) *response = std::move(*summary);
                             reactor->Finish(ToGrpcStatus(summary.status(), context));
                           });
  return reactor;
}

grpc::ServerUnaryReactor* TensorKeepService::DeclareWorkerLost(
    grpc::CallbackServerContext* context, const v1::DeclareWorkerLostRequest* request,
    v1::WorkerStatus* response) {
  // Finished from the committer's completion, as EndTrial.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const CallAccess access = Access(context);
  if (absl::Status allowed = access.CheckTrial(request->trial()); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed, context));
    return reactor;
  }
  spdlog::info("{} ({}) declares worker '{}' of trial '{}' lost", access.who(), context->peer(),
               request->worker(), request->trial());
  collector_->DeclareWorkerLost(
      request->trial(), request->worker(),
      [context, reactor, response](absl::StatusOr<v1::WorkerStatus> status) {
        if (status.ok()) *response = std::move(*status);
        reactor->Finish(ToGrpcStatus(status.status(), context));
      });
  return reactor;
}

grpc::ServerUnaryReactor* TensorKeepService::ListSteps(grpc::CallbackServerContext* context,
                                                       const v1::ListStepsRequest* request,
                                                       v1::StepList* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    TK_RETURN_IF_ERROR(ValidateMode(request->mode(), true));
    TK_ASSIGN_OR_RETURN(
        auto steps, trial->Steps(request->mode(), request->show_incomplete_steps(),
                                 request->tensor(), request->range_begin(), request->range_end()));
    AddAll(steps, response->mutable_steps());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::ListTensorNames(
    grpc::CallbackServerContext* context, const v1::ListTensorNamesRequest* request,
    v1::NameList* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    TK_RETURN_IF_ERROR(ValidateMode(request->mode(), true));
    std::optional<uint64_t> step;
    if (request->has_step()) step = request->step();
    std::vector<std::string> regex(request->regex().begin(), request->regex().end());
    TK_ASSIGN_OR_RETURN(auto names,
                        trial->TensorNames(step, request->mode(), regex, request->collection()));
    AddAll(names, response->mutable_names());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::MapStep(grpc::CallbackServerContext* context,
                                                     const v1::StepMappingRequest* request,
                                                     v1::StepMapping* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    TK_RETURN_IF_ERROR(ValidateMode(request->mode(), true));
    uint64_t global = request->step();
    if (!IsGlobalMode(request->mode())) {
      TK_ASSIGN_OR_RETURN(global, trial->GlobalStep(request->mode(), request->step()));
    }
    TK_ASSIGN_OR_RETURN(StepInfo info, trial->ModeOf(global));
    response->set_global_step(global);
    response->set_mode(static_cast<v1::Mode>(info.mode));
    response->set_mode_step(info.mode_step);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::ListWorkers(grpc::CallbackServerContext* context,
                                                         const v1::TrialRef* request,
                                                         v1::WorkerList* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    for (v1::WorkerStatus& s : collector_->WorkerStatuses(*trial)) {
      response->add_workers(s.worker());
      *response->add_statuses() = std::move(s);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::ListCollections(grpc::CallbackServerContext* context,
                                                             const v1::TrialRef* request,
                                                             v1::CollectionsResponse* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    for (auto& c : trial->CollectionInfos()) *response->add_collections() = std::move(c);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::GetCollection(grpc::CallbackServerContext* context,
                                                           const v1::CollectionRequest* request,
                                                           v1::CollectionInfo* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    for (auto& c : trial->CollectionInfos()) {
      if (c.name() != request->name()) continue;
      *response = std::move(c);
      return absl::OkStatus();
    }
    return absl::NotFoundError(absl::StrCat("collection ", QuoteInput(request->name()),
                                            " not found in trial '", request->trial(), "'"));
  });
}

grpc::ServerUnaryReactor* TensorKeepService::PutCollections(
    grpc::CallbackServerContext* context, const v1::PutCollectionsRequest* request,
    v1::PutCollectionsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status allowed = CheckTrial(context, request->trial()); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed, context));
    return reactor;
  }
  collector_->PutCollections(
      *request, SeesUnpublished(context),
      [context, reactor, response](absl::StatusOr<v1::PutCollectionsResponse> stored) {
        if (stored.ok()) *response = std::move(*stored);
        reactor->Finish(ToGrpcStatus(stored.status(), context));
      });
  return reactor;
}

grpc::ServerWriteReactor<v1::TensorValue>* TensorKeepService::GetValue(
    grpc::CallbackServerContext* context, const v1::TensorRequest* request) {
  auto located = [&]() -> absl::StatusOr<std::pair<std::shared_ptr<Trial>, Trial::Located>> {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    TK_RETURN_IF_ERROR(ValidateMode(request->mode(), true));
    TK_ASSIGN_OR_RETURN(auto where, trial->Locate(request->tensor(), request->step(),
                                                  request->mode(), request->worker()));
    return std::make_pair(trial, where);
  }();
  if (!located.ok()) return new FailedWriteReactor<v1::TensorValue>(context, located.status());
  return new ValueStreamReactor(context, collector_, located->first, request->tensor(),
                                {located->second});
}

grpc::ServerWriteReactor<v1::TensorValue>* TensorKeepService::GetValues(
    grpc::CallbackServerContext* context, const v1::TensorValuesRequest* request) {
  auto located =
      [&]() -> absl::StatusOr<std::pair<std::shared_ptr<Trial>, std::vector<Trial::Located>>> {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    TK_RETURN_IF_ERROR(ValidateMode(request->mode(), true));
    TK_ASSIGN_OR_RETURN(auto where,
                        trial->LocateAll(request->tensor(), request->mode(), request->worker(),
                                         request->range_begin(), request->range_end()));
    return std::make_pair(trial, std::move(where));
  }();
  if (!located.ok()) return new FailedWriteReactor<v1::TensorValue>(context, located.status());
  return new ValueStreamReactor(context, collector_, located->first, request->tensor(),
                                std::move(located->second), request->packed());
}

grpc::ServerUnaryReactor* TensorKeepService::TensorWorkers(grpc::CallbackServerContext* context,
                                                           const v1::TensorWorkersRequest* request,
                                                           v1::WorkerList* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    TK_RETURN_IF_ERROR(ValidateMode(request->mode(), true));
    TK_ASSIGN_OR_RETURN(auto workers,
                        trial->TensorWorkers(request->tensor(), request->step(), request->mode()));
    AddAll(workers, response->mutable_workers());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::PrevSteps(grpc::CallbackServerContext* context,
                                                       const v1::PrevStepsRequest* request,
                                                       v1::StepList* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    TK_RETURN_IF_ERROR(ValidateMode(request->mode(), true));
    TK_ASSIGN_OR_RETURN(auto steps, trial->PrevSteps(request->tensor(), request->step(),
                                                     request->n(), request->mode()));
    AddAll(steps, response->mutable_steps());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::GetReductions(grpc::CallbackServerContext* context,
                                                           const v1::ReductionsRequest* request,
                                                           v1::ReductionsResponse* response) {
  return Offload(context, collector_->executor(),
                 [this, context, request, response]() -> absl::Status {
    TK_RETURN_IF_ERROR(TrialFor(context, request->tensor().trial()).status());
    for (const auto& spec : request->reductions()) {
      TK_RETURN_IF_ERROR(ValidateReductionName(spec.name()));
    }
    auto r = collector_->Reductions(*request);
    if (!r.ok()) {
      // An unknown reduction name is the caller's mistake.
      if (r.status().code() == absl::StatusCode::kInvalidArgument &&
          GetReason(r.status()) == Reason::kNone) {
        return MakeError(Reason::kBadRequest, r.status().message());
      }
      return r.status();
    }
    *response = std::move(*r);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::GetHistogram(grpc::CallbackServerContext* context,
                                                          const v1::HistogramRequest* request,
                                                          v1::HistogramResponse* response) {
  return Offload(context, collector_->executor(),
                 [this, context, request, response]() -> absl::Status {
    TK_RETURN_IF_ERROR(TrialFor(context, request->tensor().trial()).status());
    TK_ASSIGN_OR_RETURN(*response, collector_->Histogram(*request));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::HasPassedStep(grpc::CallbackServerContext* context,
                                                           const v1::HasPassedStepRequest* request,
                                                           v1::HasPassedStepResponse* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    TK_RETURN_IF_ERROR(ValidateMode(request->mode(), true));
    response->set_state(
        static_cast<v1::StepState>(trial->HasPassedStep(request->step(), request->mode())));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TensorKeepService::WaitForSteps(grpc::CallbackServerContext* context,
                                                          const v1::WaitForStepsRequest* request,
                                                          v1::WaitForStepsResponse*) {
  auto trial = TrialFor(context, request->trial());
  absl::Status bad = trial.status();
  if (bad.ok()) bad = ValidateMode(request->mode(), true);
  if (bad.ok() && request->steps_size() > kMaxWaitSteps) {
    bad = MakeError(Reason::kBadRequest,
                    absl::StrCat("WaitForSteps asks for ", request->steps_size(),
                                 " steps; the limit is ", kMaxWaitSteps,
                                 " (MAX_WAIT_STEPS): wait for the last step of a range (steps "
                                 "complete in order), or in several calls"));
  }
  if (bad.ok() && !(request->timeout_seconds() >= 0)) {  // negative or NaN
    bad = MakeError(Reason::kBadRequest,
                    absl::StrCat("timeout_seconds must be >= 0 (0: no limit), got ",
                                 request->timeout_seconds()));
  }
  // The step list (the request's and the reactor's copy) is held as long as
  // the call waits: it draws on the memory budget, so that many long waits
  // cannot exhaust the collector (the caps bound their number, not their size).
  MemoryBudget::Reservation memory;
  if (bad.ok()) {
    auto room = collector_->memory()->Reserve(
        2 * sizeof(uint64_t) * static_cast<size_t>(request->steps_size()),
        absl::StrCat("the ", request->steps_size(), " steps of a WaitForSteps call"));
    if (room.ok()) {
      memory = *std::move(room);
    } else {
      bad = room.status();
    }
  }
  if (!bad.ok()) {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(bad, context));
    return reactor;
  }
  return new WaitReactor(context, *trial,
                         std::vector<uint64_t>(request->steps().begin(), request->steps().end()),
                         request->mode(), request->timeout_seconds(), std::move(memory));
}

grpc::ServerWriteReactor<v1::StepEvent>* TensorKeepService::WatchSteps(
    grpc::CallbackServerContext* context, const v1::WatchStepsRequest* request) {
  auto trial = TrialFor(context, request->trial());
  if (!trial.ok()) return new FailedWriteReactor<v1::StepEvent>(context, trial.status());
  return new WatchStepsReactor(*trial, request->from_step());
}

grpc::ServerUnaryReactor* TensorKeepService::ReportRuleStatus(grpc::CallbackServerContext* context,
                                                              const v1::RuleStatus* request,
                                                              v1::RuleStatus* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const CallAccess access = Access(context);
  if (absl::Status allowed = access.CheckTrial(request->trial()); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed, context));
    return reactor;
  }
  if (request->state() == v1::RuleStatus::ISSUES_FOUND && request->action() == "stop") {
    spdlog::info("{} ({}) reports rule '{}' found issues on trial '{}' with action stop",
                 access.who(), context->peer(), request->rule(), request->trial());
  }
  collector_->ReportRuleStatus(
      *request, [context, reactor, response](absl::StatusOr<v1::RuleStatus> stored) {
        if (stored.ok()) *response = std::move(*stored);
        reactor->Finish(ToGrpcStatus(stored.status(), context));
      });
  return reactor;
}

grpc::ServerUnaryReactor* TensorKeepService::ListRuleStatuses(grpc::CallbackServerContext* context,
                                                              const v1::TrialRef* request,
                                                              v1::RuleStatusList* response) {
  return Unary(context, [&]() -> absl::Status {
    TK_ASSIGN_OR_RETURN(auto trial, TrialFor(context, request->trial()));
    for (auto& rs : trial->RuleStatuses()) *response->add_statuses() = std::move(rs);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::RuleStatus>* TensorKeepService::WatchRuleStatuses(
    grpc::CallbackServerContext* context, const v1::WatchRuleStatusesRequest* request) {
  auto trial = TrialFor(context, request->trial());
  if (!trial.ok()) return new FailedWriteReactor<v1::RuleStatus>(context, trial.status());
  return new WatchRulesReactor(*trial);
}

}  // namespace tensorkeep
