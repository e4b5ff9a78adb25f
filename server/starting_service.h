// StartingService: the TensorKeep service as gRPC serves it from the moment
// the port opens, before the collector has recovered its index. Until
// Serve(service) every call fails with UNAVAILABLE saying that recovery is in
// progress (clients retry UNAVAILABLE by themselves); from then on every call
// goes to `service`. Together with the health service (NOT_SERVING until
// then) and reflection, which answer at once, probes and standard tools see
// a collector that is starting rather than a refused connection
// (docs/shared-collector.md "Health and introspection").
//
// A method missing here would answer UNIMPLEMENTED even after start-up:
// tests/server/access_test.cc calls every RPC through it.
//
// Why not one refusal in a server interceptor (so that a new RPC need not be
// added here too): gRPC's server interceptors (1.51, Debian 12) cannot end a
// call before its handler runs. Tried on a callback-API bidi stream:
// Hijack() is client-only and asserts on a server ("call_->client_rpc_info()
// != nullptr", grpcpp/impl/codegen/interceptor_common.h); TryCancel() at
// POST_RECV_INITIAL_METADATA gives the client CANCELLED, not UNAVAILABLE, and
// the handler still runs; ModifySendStatus() at PRE_SEND_STATUS can say
// UNAVAILABLE, but only once the handler has run and finished. Nor can the
// AuthMetadataProcessor (it refuses before the handler) do it: a plaintext
// collector without tokens has none.
//
// Thread safety: Serve() once, from any thread; calls from gRPC's threads.
#ifndef TENSORKEEP_SERVER_STARTING_SERVICE_H_
#define TENSORKEEP_SERVER_STARTING_SERVICE_H_

#include <atomic>

#include "proto/tensorkeep.grpc.pb.h"
#include "server/tensorkeep_service.h"

namespace tensorkeep {

class StartingService final : public v1::TensorKeep::CallbackService {
 public:
  // From now on calls go to `service` (not owned; outlives the gRPC server).
  void Serve(TensorKeepService* service) { service_.store(service, std::memory_order_release); }

  grpc::ServerBidiReactor<v1::PushRequest, v1::PushResponse>* Push(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ListTrials(grpc::CallbackServerContext* context,
                                       const v1::ListTrialsRequest* request,
                                       v1::ListTrialsResponse* response) override;
  grpc::ServerUnaryReactor* GetTrial(grpc::CallbackServerContext* context,
                                     const v1::TrialRef* request,
                                     v1::TrialSummary* response) override;
  grpc::ServerUnaryReactor* EndTrial(grpc::CallbackServerContext* context,
                                     const v1::TrialRef* request,
                                     v1::EndTrialResponse* response) override;
  grpc::ServerUnaryReactor* DeleteTrial(grpc::CallbackServerContext* context,
                                        const v1::DeleteTrialRequest* request,
                                        v1::DeleteTrialResponse* response) override;
  grpc::ServerUnaryReactor* PublishTrial(grpc::CallbackServerContext* context,
                                         const v1::TrialRef* request,
                                         v1::TrialSummary* response) override;
  grpc::ServerUnaryReactor* DeclareWorkerLost(grpc::CallbackServerContext* context,
                                              const v1::DeclareWorkerLostRequest* request,
                                              v1::WorkerStatus* response) override;
  grpc::ServerUnaryReactor* ListSteps(grpc::CallbackServerContext* context,
                                      const v1::ListStepsRequest* request,
                                      v1::StepList* response) override;
  grpc::ServerUnaryReactor* ListTensorNames(grpc::CallbackServerContext* context,
                                            const v1::ListTensorNamesRequest* request,
                                            v1::NameList* response) override;
  grpc::ServerUnaryReactor* MapStep(grpc::CallbackServerContext* context,
                                    const v1::StepMappingRequest* request,
                                    v1::StepMapping* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const v1::TrialRef* request,
                                        v1::WorkerList* response) override;
  grpc::ServerUnaryReactor* ListCollections(grpc::CallbackServerContext* context,
                                            const v1::TrialRef* request,
                                            v1::CollectionsResponse* response) override;
  grpc::ServerUnaryReactor* GetCollection(grpc::CallbackServerContext* context,
                                          const v1::CollectionRequest* request,
                                          v1::CollectionInfo* response) override;
  grpc::ServerWriteReactor<v1::TensorValue>* GetValue(grpc::CallbackServerContext* context,
                                                      const v1::TensorRequest* request) override;
  grpc::ServerWriteReactor<v1::TensorValue>* GetValues(
      grpc::CallbackServerContext* context, const v1::TensorValuesRequest* request) override;
  grpc::ServerUnaryReactor* TensorWorkers(grpc::CallbackServerContext* context,
                                          const v1::TensorWorkersRequest* request,
                                          v1::WorkerList* response) override;
  grpc::ServerUnaryReactor* PrevSteps(grpc::CallbackServerContext* context,
                                      const v1::PrevStepsRequest* request,
                                      v1::StepList* response) override;
  grpc::ServerUnaryReactor* GetReductions(grpc::CallbackServerContext* context,
                                          const v1::ReductionsRequest* request,
                                          v1::ReductionsResponse* response) override;
  grpc::ServerUnaryReactor* GetHistogram(grpc::CallbackServerContext* context,
                                         const v1::HistogramRequest* request,
                                         v1::HistogramResponse* response) override;
  grpc::ServerUnaryReactor* HasPassedStep(grpc::CallbackServerContext* context,
                                          const v1::HasPassedStepRequest* request,
                                          v1::HasPassedStepResponse* response) override;
  grpc::ServerUnaryReactor* WaitForSteps(grpc::CallbackServerContext* context,
                                         const v1::WaitForStepsRequest* request,
                                         v1::WaitForStepsResponse* response) override;
  grpc::ServerWriteReactor<v1::StepEvent>* WatchSteps(
      grpc::CallbackServerContext* context, const v1::WatchStepsRequest* request) override;
  grpc::ServerUnaryReactor* ReportRuleStatus(grpc::CallbackServerContext* context,
                                             const v1::RuleStatus* request,
                                             v1::RuleStatus* response) override;
  grpc::ServerUnaryReactor* PutCollections(grpc::CallbackServerContext* context,
                                           const v1::PutCollectionsRequest* request,
                                           v1::PutCollectionsResponse* response) override;
  grpc::ServerUnaryReactor* ListRuleStatuses(grpc::CallbackServerContext* context,
                                             const v1::TrialRef* request,
                                             v1::RuleStatusList* response) override;
  grpc::ServerWriteReactor<v1::RuleStatus>* WatchRuleStatuses(
      grpc::CallbackServerContext* context, const v1::WatchRuleStatusesRequest* request) override;

 private:
  std::atomic<TensorKeepService*> service_{nullptr};
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_STARTING_SERVICE_H_
