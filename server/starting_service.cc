#include "server/starting_service.h"

namespace tensorkeep {
namespace {

grpc::Status Recovering() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "the collector is starting: it is recovering its index from the data "
                      "directory; retry shortly (grpc.health.v1.Health says SERVING once it is "
                      "done)");
}

template <class Response>
class RefusedWrite : public grpc::ServerWriteReactor<Response> {
 public:
  explicit RefusedWrite(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

template <class Request, class Response>
class RefusedBidi : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit RefusedBidi(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerBidiReactor<v1::PushRequest, v1::PushResponse>* StartingService::Push(
    grpc::CallbackServerContext* context) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->Push(context);
  }
  return new RefusedBidi<v1::PushRequest, v1::PushResponse>(Recovering());
}

grpc::ServerUnaryReactor* StartingService::ListTrials(grpc::CallbackServerContext* context,
                                                      const v1::ListTrialsRequest* request,
                                                      v1::ListTrialsResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->ListTrials(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::GetTrial(grpc::CallbackServerContext* context,
                                                    const v1::TrialRef* request,
                                                    v1::TrialSummary* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->GetTrial(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::EndTrial(grpc::CallbackServerContext* context,
                                                    const v1::TrialRef* request,
                                                    v1::EndTrialResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->EndTrial(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::DeleteTrial(grpc::CallbackServerContext* context,
                                                       const v1::DeleteTrialRequest* request,
                                                       v1::DeleteTrialResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->DeleteTrial(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::PublishTrial(grpc::CallbackServerContext* context,
                                                        const v1::TrialRef* request,
                                                        v1::TrialSummary* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->PublishTrial(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::DeclareWorkerLost(
    grpc::CallbackServerContext* context, const v1::DeclareWorkerLostRequest* request,
    v1::WorkerStatus* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->DeclareWorkerLost(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::ListSteps(grpc::CallbackServerContext* context,
                                                     const v1::ListStepsRequest* request,
                                                     v1::StepList* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->ListSteps(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::ListTensorNames(
    grpc::CallbackServerContext* context, const v1::ListTensorNamesRequest* request,
    v1::NameList* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->ListTensorNames(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::MapStep(grpc::CallbackServerContext* context,
                                                   const v1::StepMappingRequest* request,
                                                   v1::StepMapping* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->MapStep(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::ListWorkers(grpc::CallbackServerContext* context,
                                                       const v1::TrialRef* request,
                                                       v1::WorkerList* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->ListWorkers(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::ListCollections(grpc::CallbackServerContext* context,
                                                           const v1::TrialRef* request,
                                                           v1::CollectionsResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->ListCollections(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::GetCollection(grpc::CallbackServerContext* context,
                                                         const v1::CollectionRequest* request,
                                                         v1::CollectionInfo* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->GetCollection(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerWriteReactor<v1::TensorValue>* StartingService::GetValue(
    grpc::CallbackServerContext* context, const v1::TensorRequest* request) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->GetValue(context, request);
  }
  return new RefusedWrite<v1::TensorValue>(Recovering());
}

grpc::ServerWriteReactor<v1::TensorValue>* StartingService::GetValues(
    grpc::CallbackServerContext* context, const v1::TensorValuesRequest* request) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->GetValues(context, request);
  }
  return new RefusedWrite<v1::TensorValue>(Recovering());
}

grpc::ServerUnaryReactor* StartingService::TensorWorkers(grpc::CallbackServerContext* context,
                                                         const v1::TensorWorkersRequest* request,
                                                         v1::WorkerList* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->TensorWorkers(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::PrevSteps(grpc::CallbackServerContext* context,
                                                     const v1::PrevStepsRequest* request,
                                                     v1::StepList* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->PrevSteps(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::GetReductions(grpc::CallbackServerContext* context,
                                                         const v1::ReductionsRequest* request,
                                                         v1::ReductionsResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->GetReductions(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::GetHistogram(grpc::CallbackServerContext* context,
                                                        const v1::HistogramRequest* request,
                                                        v1::HistogramResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->GetHistogram(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::HasPassedStep(grpc::CallbackServerContext* context,
                                                         const v1::HasPassedStepRequest* request,
                                                         v1::HasPassedStepResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->HasPassedStep(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::WaitForSteps(grpc::CallbackServerContext* context,
                                                        const v1::WaitForStepsRequest* request,
                                                        v1::WaitForStepsResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->WaitForSteps(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerWriteReactor<v1::StepEvent>* StartingService::WatchSteps(
    grpc::CallbackServerContext* context, const v1::WatchStepsRequest* request) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->WatchSteps(context, request);
  }
  return new RefusedWrite<v1::StepEvent>(Recovering());
}

grpc::ServerUnaryReactor* StartingService::ReportRuleStatus(grpc::CallbackServerContext* context,
                                                            const v1::RuleStatus* request,
                                                            v1::RuleStatus* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->ReportRuleStatus(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::PutCollections(grpc::CallbackServerContext* context,
                                                          const v1::PutCollectionsRequest* request,
                                                          v1::PutCollectionsResponse* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->PutCollections(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerUnaryReactor* StartingService::ListRuleStatuses(grpc::CallbackServerContext* context,
                                                            const v1::TrialRef* request,
                                                            v1::RuleStatusList* response) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->ListRuleStatuses(context, request, response);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(Recovering());
  return reactor;
}

grpc::ServerWriteReactor<v1::RuleStatus>* StartingService::WatchRuleStatuses(
    grpc::CallbackServerContext* context, const v1::WatchRuleStatusesRequest* request) {
  if (TensorKeepService* s = service_.load(std::memory_order_acquire)) {
    return s->WatchRuleStatuses(context, request);
  }
  return new RefusedWrite<v1::RuleStatus>(Recovering());
}

}  // namespace tensorkeep
