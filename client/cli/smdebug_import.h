// import-smdebug: an smdebug trial directory (smdebug_layout.h) into a new
// tensorkeep trial, through the C++ Writer (one per worker), with a progress
// bar on a terminal and a summary at the end. Values keep their dtype, shape
// and bytes; saved reductions (smdebug/reductions/...) become the tensor's
// saved reductions (a reductions-only tensor stays without a value); modes and
// mode steps come from each event's plugin data; each worker's collections
// file (smdebug_collections.h) is stored as that worker's configuration
// (PutCollections: include_regex, tensor_names, save and reduction configs,
// save_histogram) and tags its tensors (tensor_names, and include_regex
// matched with RE2 as re.search would; lookaround regexes are stored but
// matched only by the Python client); the trial ends if training_job_end.ts
// exists.
// Event files are read whole-record by whole-record: a file cut mid-record by
// a crash contributes its whole records and is reported.
#ifndef TENSORKEEP_CLIENT_CLI_SMDEBUG_IMPORT_H_
#define TENSORKEEP_CLIENT_CLI_SMDEBUG_IMPORT_H_

#include <memory>

#include "client/cli/args.h"
#include "client/connection.h"

namespace tensorkeep {
namespace cli {

// `tensorkeep import-smdebug DIR TRIAL`.
int ImportSmdebug(const Args& args, const std::shared_ptr<Connection>& connection,
                  const ClientSecurity& security);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_SMDEBUG_IMPORT_H_
