// Trial walk: reads a trial whole through the query API, record by record,
// and fingerprints what a reader can see of it, so that two copies of a
// trial (`tensorkeep rebalance`) can be compared without trusting either
// collector's own accounting.
//
// The fingerprint covers: the summary (workers, each worker's state, last
// saved and committed step, number of workers, steps and tensor names, last
// and complete-through step, end, stop request and reason); the collections;
// the rule statuses (state, step, message, action, last evaluated step; not
// their update times); and every record of every worker at every global
// step (mode, mode step, dtype, shape, a SHA-256 of the value's bytes, saved
// reductions). Not covered (they are the time of the copy on a copy): when
// the trial was created and ended, when and why a worker became LOST, when a
// rule status was updated.
#ifndef TENSORKEEP_CLIENT_CLI_TRIAL_WALK_H_
#define TENSORKEEP_CLIENT_CLI_TRIAL_WALK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/trial.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace cli {

struct TrialFingerprint {
  uint64_t steps = 0;
  uint64_t records = 0;
  uint64_t values = 0;  // records with a value (the others saved only reductions)
  uint64_t value_bytes = 0;
  uint64_t rules = 0;
  std::string sha256;  // hex, of everything listed above

  bool operator==(const TrialFingerprint& o) const {
    return steps == o.steps && records == o.records && values == o.values &&
           value_bytes == o.value_bytes && rules == o.rules && sha256 == o.sha256;
  }
  bool operator!=(const TrialFingerprint& o) const { return !(*this == o); }
  // "12 steps, 240 records (240 values, 1.2 MiB), 2 rule statuses, sha256 0123abcd…"
  std::string Describe() const;
};

// What a walk saw besides the records.
struct TrialContents {
  v1::TrialSummary summary;  // workers sorted by name
  std::vector<v1::RuleStatus> rules;
};

// Reads `trial` whole. `on_record` (may be null) gets each record with the
// worker that saved it, ready to write (a TensorRecord with its value or
// only reductions, its collections and mode step), in increasing step order;
// an error from it ends the walk.
using RecordSink = std::function<absl::Status(const std::string& worker, v1::TensorRecord record)>;
absl::StatusOr<TrialFingerprint> WalkTrial(const client::Trial& trial, TrialContents* contents,
                                           const RecordSink& on_record);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_TRIAL_WALK_H_
