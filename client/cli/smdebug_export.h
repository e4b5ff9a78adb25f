// export-smdebug: a trial as smdebug's local layout (smdebug_layout.h), so
// that smdebug's create_trial(DIR) reads back the same steps, modes, mode
// steps, workers, values (dtype, shape, bytes), saved reductions and
// collections. Event files carry smdebug's placeholder data CRC, the only one
// smdebug's default reader accepts. DIR must not hold an smdebug trial yet.
#ifndef TENSORKEEP_CLIENT_CLI_SMDEBUG_EXPORT_H_
#define TENSORKEEP_CLIENT_CLI_SMDEBUG_EXPORT_H_

#include <memory>

#include "client/cli/args.h"
#include "client/connection.h"

namespace tensorkeep {
namespace cli {

// `tensorkeep export-smdebug TRIAL DIR`.
int ExportSmdebug(const Args& args, const std::shared_ptr<Connection>& connection);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_SMDEBUG_EXPORT_H_
