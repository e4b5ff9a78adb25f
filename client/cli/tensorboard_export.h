// export-tensorboard: a trial as TensorBoard event files, one run directory
// per worker (DIR/worker_0, DIR/worker_1, ...):
//   - a tensor of one element (a loss, a saved scalar) as a scalar tagged
//     with its name;
//   - chosen reductions of larger tensors as scalars tagged NAME/REDUCTION
//     (NAME/abs_REDUCTION for the absolute value), computed from the value,
//     and the reductions a writer saved instead of a value likewise;
//   - larger tensors as histograms tagged NAME (30 equal-width bins between
//     the finite minimum and maximum).
// The event step is the global step. With --follow it keeps writing as steps
// complete (WatchSteps) and returns when the trial ends or on SIGINT/SIGTERM,
// with every file closed on whole records.
#ifndef TENSORKEEP_CLIENT_CLI_TENSORBOARD_EXPORT_H_
#define TENSORKEEP_CLIENT_CLI_TENSORBOARD_EXPORT_H_

#include <memory>

#include "client/cli/args.h"
#include "client/connection.h"

namespace tensorkeep {
namespace cli {

// `tensorkeep export-tensorboard TRIAL DIR [--follow] [--reductions mean,std,...]`.
int ExportTensorboard(const Args& args, const std::shared_ptr<Connection>& connection);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_TENSORBOARD_EXPORT_H_
