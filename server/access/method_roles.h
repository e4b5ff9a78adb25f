// The role each RPC needs, by full method path ("/tensorkeep.v1.TensorKeep/
// Push"). A method missing from the table is refused to everyone (default
// deny): tests/server/access_test.cc fails for an RPC of the service without
// a role here.
#ifndef TENSORKEEP_SERVER_ACCESS_METHOD_ROLES_H_
#define TENSORKEEP_SERVER_ACCESS_METHOD_ROLES_H_

#include <optional>
#include <string_view>

#include "base/tokens.h"

namespace tensorkeep {

// The role `path` needs (Role::kNone: anyone, without a token), or nullopt
// for a method the collector does not know.
std::optional<Role> RoleForMethod(std::string_view path);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_ACCESS_METHOD_ROLES_H_
