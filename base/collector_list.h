// A list of collectors as people write it: "HOST:PORT,HOST:PORT,..." (the
// --cluster flag, TENSORKEEP_SERVERS, several --server flags). Shared by the
// collector and the clients so that both accept and refuse the same lists.
#ifndef TENSORKEEP_BASE_COLLECTOR_LIST_H_
#define TENSORKEEP_BASE_COLLECTOR_LIST_H_

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace tensorkeep {

// Whether `address` has the form HOST:PORT (HOST a name, an IPv4 address or
// a bracketed IPv6 address; PORT 1-65535).
bool IsHostPort(absl::string_view address);

// Splits `text` at commas (spaces around items ignored). InvalidArgument,
// naming `what` and the item, for an empty list, an item that is not
// HOST:PORT, or one listed twice.
absl::StatusOr<std::vector<std::string>> ParseCollectorList(absl::string_view text,
                                                            absl::string_view what);

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_COLLECTOR_LIST_H_
