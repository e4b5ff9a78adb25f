// Trial and Tensor: smdebug's analysis API over a collector, in C++.
//
// Method names and semantics are smdebug's (docs/semantics.md): steps given
// with a mode other than GLOBAL are mode steps; errors carry the reasons of
// base/errors.h (TensorUnavailable, TensorUnavailableForStep, StepUnavailable,
// StepNotYetAvailable, InvalidWorker, NoMoreData, TrialNotFound); use
// tensorkeep::GetReason(status) to tell them apart.
//
// Thread safety: both classes are immutable handles and thread-safe.
#ifndef TENSORKEEP_CLIENT_TRIAL_H_
#define TENSORKEEP_CLIENT_TRIAL_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace client {

// smdebug's modes.
enum Mode : int { kTrain = 1, kEval = 2, kPredict = 3, kGlobal = 4 };
// "TRAIN", "EVAL", "PREDICT", "GLOBAL" (case-insensitive) or 1-4.
absl::StatusOr<int> ParseMode(const std::string& text);
std::string ModeText(int mode);

enum class StepState { kUnavailable = 1, kAvailable = 2, kNotYetAvailable = 3 };

// One saved value.
struct Value {
  uint64_t step = 0;  // global
  int mode = kGlobal;
  uint64_t mode_step = 0;
  std::string worker;
  int dtype = 0;  // tensorkeep::DType
  std::vector<int64_t> shape;
  std::string data;  // little-endian, C order
};

struct Histogram {
  std::vector<double> edges;
  std::vector<uint64_t> counts;
  uint64_t nan_count = 0;
  uint64_t outside_count = 0;
};

class Tensor;

class Trial {
 public:
  Trial(std::shared_ptr<Connection> connection, std::string name);

  const std::string& name() const { return name_; }
  const std::shared_ptr<Connection>& connection() const { return connection_; }

  absl::StatusOr<v1::TrialSummary> Summary() const;
  absl::StatusOr<std::vector<uint64_t>> Steps(int mode = kGlobal,
                                              bool show_incomplete_steps = false) const;
  absl::StatusOr<std::vector<std::string>> TensorNames(
      std::optional<uint64_t> step = std::nullopt, int mode = kGlobal,
      const std::vector<std::string>& regex = {}, const std::string& collection = "") const;
  absl::StatusOr<bool> HasTensor(const std::string& name) const;
  Tensor tensor(const std::string& name) const;
  absl::StatusOr<std::vector<int>> Modes() const;
  absl::StatusOr<int> ModeOf(uint64_t global_step) const;
  absl::StatusOr<uint64_t> ModeStep(uint64_t global_step) const;
  absl::StatusOr<uint64_t> GlobalStep(int mode, uint64_t mode_step) const;
  absl::StatusOr<std::vector<std::string>> Workers() const;
  // Each worker's state (ACTIVE, CLOSED, LOST), last saved and committed
  // step and whether it is connected, sorted by name.
  absl::StatusOr<std::vector<v1::WorkerStatus>> WorkerStatuses() const;
  // Declares `worker` LOST (steps complete without it); returns its status.
  absl::StatusOr<v1::WorkerStatus> DeclareWorkerLost(const std::string& worker) const;
  absl::StatusOr<std::map<std::string, std::vector<std::string>>> Collections() const;
  // Every collection with its configuration (PutCollections), empty ones
  // included, sorted by name.
  absl::StatusOr<std::vector<v1::CollectionInfo>> CollectionInfos() const;
  // Stores `collections` as `worker`'s collection configuration (replacing
  // what it sent before); returns how many collections the trial has now.
  absl::StatusOr<uint32_t> PutCollections(const std::string& worker,
                                          const std::vector<v1::CollectionConfig>& collections) const;
  absl::StatusOr<StepState> HasPassedStep(uint64_t step, int mode = kGlobal) const;
  // Returns when every step is available; StepUnavailable / NoMoreData when
  // one never will be; Timeout after `timeout_seconds` (0: no limit).
  absl::Status WaitForSteps(const std::vector<uint64_t>& steps, int mode = kGlobal,
                            double timeout_seconds = 0) const;
  // Ends the trial; returns whether it was running.
  absl::StatusOr<bool> End() const;
  // Publishes a copy written unpublished (an admin token's call; tensorkeep
  // rebalance); returns its summary.
  absl::StatusOr<v1::TrialSummary> Publish() const;
  // Deletes the trial and everything stored of it (an admin token's call):
  // afterwards its readers get TrialNotFound and a writer opening the name
  // starts a new trial. With `wait_reclaimed`, returns once its space is
  // reclaimed too (the response says how much). Not retried: a repeat gets
  // TrialNotFound.
  absl::StatusOr<v1::DeleteTrialResponse> Delete(bool wait_reclaimed = true) const;
  absl::StatusOr<std::vector<v1::RuleStatus>> RuleStatuses() const;
  absl::Status ReportRuleStatus(const v1::RuleStatus& status) const;

 private:
  std::shared_ptr<Connection> connection_;
  std::string name_;
};

class Tensor {
 public:
  Tensor(std::shared_ptr<Connection> connection, std::string trial, std::string name);

  const std::string& name() const { return name_; }

  absl::StatusOr<std::vector<uint64_t>> Steps(int mode = kGlobal,
                                              bool show_incomplete_steps = false) const;
  absl::StatusOr<Value> GetValue(uint64_t step, int mode = kGlobal,
                                 const std::string& worker = "") const;
  // Every complete step's value in one streamed call, keyed by step (mode
  // steps when mode is not GLOBAL).
  absl::StatusOr<std::map<uint64_t, Value>> Values(int mode = kGlobal,
                                                   const std::string& worker = "") const;
  absl::StatusOr<std::vector<std::string>> Workers(uint64_t step, int mode = kGlobal) const;
  absl::StatusOr<std::vector<uint64_t>> PrevSteps(uint64_t step, uint32_t n,
                                                  int mode = kGlobal) const;
  absl::StatusOr<double> ReductionValue(uint64_t step, const std::string& reduction,
                                        int mode = kGlobal, const std::string& worker = "",
                                        bool abs = false) const;
  // Several reductions of one value, computed in one pass on the server.
  absl::StatusOr<std::vector<double>> ReductionValues(
      uint64_t step, const std::vector<std::pair<std::string, bool>>& reductions,
      int mode = kGlobal, const std::string& worker = "") const;
  // The reductions the writer saved: {(name, abs) -> value}.
  absl::StatusOr<std::map<std::pair<std::string, bool>, double>> SavedReductions(
      uint64_t step, int mode = kGlobal, const std::string& worker = "") const;
  absl::StatusOr<Histogram> GetHistogram(uint64_t step, int bins = 30,
                                         std::optional<std::pair<double, double>> range = {},
                                         int mode = kGlobal, const std::string& worker = "") const;

 private:
  // Fills the (trial, tensor, step, mode, worker) address of a request.
  void Address(uint64_t step, int mode, const std::string& worker,
               v1::TensorRequest* request) const;
  absl::StatusOr<std::vector<Value>> ReadValues(
      const std::function<std::unique_ptr<grpc::ClientReader<v1::TensorValue>>(
          grpc::ClientContext*)>& call) const;

  std::shared_ptr<Connection> connection_;
  std::string trial_;
  std::string name_;
};

}  // namespace client
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_TRIAL_H_
