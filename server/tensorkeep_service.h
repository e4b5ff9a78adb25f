// TensorKeepService: the gRPC face of the Collector (callback API).
//
// Thin by design: each method unpacks its request, calls the Collector or
// the Trial, and maps the status with ToGrpcStatus. Streams are reactors:
// Push (flow-controlled: it stops reading while its writes waiting for the
// committer fill its byte window, or while the committer's queue or the
// memory budget is over its limit; server/push_reactor.h), GetValue and
// GetValues (values in chunks, read on the Collector's executor),
// WaitForSteps, WatchSteps and WatchRuleStatuses (woken after commits on the
// Notifier's thread through Trial::Watch, never by polling; idle waiters cost
// no CPU). Nothing blocks on gRPC's threads: EndTrial and ReportRuleStatus
// finish from the committer's completion, GetReductions and GetHistogram on
// the executor.
//
// With --auth-tokens, the method's role was checked before the handler
// (server/access); the handler checks the trial: every trial a request names
// is looked up through TrialFor (or CheckTrial), which refuses trials outside
// the token's prefixes, and ListTrials shows only those the token sees.
//
// Thread safety: the service is thread-safe; each reactor guards its state.
#ifndef TENSORKEEP_SERVER_TENSORKEEP_SERVICE_H_
#define TENSORKEEP_SERVER_TENSORKEEP_SERVICE_H_

#include <atomic>

#include "proto/tensorkeep.grpc.pb.h"
#include "server/access/access_control.h"
#include "server/collector.h"
#include "server/push_reactor.h"

namespace tensorkeep {

class TensorKeepService final : public v1::TensorKeep::CallbackService {
 public:
  // `collector` and `access` (null: no tokens, every call sees everything)
  // are not owned and must outlive the service.
  explicit TensorKeepService(Collector* collector, const AccessControl* access = nullptr)
      : collector_(collector), access_(access) {}

  // Shutdown, first phase: new Push streams are refused (UNAVAILABLE); the
  // open ones read no more and end (UNAVAILABLE) once what they read is
  // durable and acknowledged: their writers reconnect and resend the rest.
  void StartDraining() {
    draining_.store(true);
    pushes_.DrainAll();
  }
  // Push streams not yet done.
  int active_pushes() const { return pushes_.active(); }

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
  // What the call may touch.
  CallAccess Access(grpc::CallbackServerContext* context) const;
  // OK if the call may act on `trial`.
  absl::Status CheckTrial(grpc::CallbackServerContext* context, const std::string& trial) const;
  // The trial named `trial`, if the call may act on it.
  absl::StatusOr<std::shared_ptr<Trial>> TrialFor(grpc::CallbackServerContext* context,
                                                  const std::string& trial) const;

  Collector* const collector_;
  const AccessControl* const access_;
  std::atomic<bool> draining_{false};
  PushStreams pushes_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_TENSORKEEP_SERVICE_H_
