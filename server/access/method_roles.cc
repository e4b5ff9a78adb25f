#include "server/access/method_roles.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace tensorkeep {
namespace {

struct Entry {
  const char* service;
  const char* method;
  Role role;
};

// read: every query, wait and watch. write: read + Push, ending a trial,
// reporting a rule status (which may ask the trial's writers to stop),
// storing collections.
// admin: write + deletion and retention.
constexpr Entry kTable[] = {
    {"tensorkeep.v1.TensorKeep", "Push", Role::kWrite},
    {"tensorkeep.v1.TensorKeep", "ListTrials", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "GetTrial", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "EndTrial", Role::kWrite},
    {"tensorkeep.v1.TensorKeep", "ListSteps", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "ListTensorNames", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "MapStep", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "ListWorkers", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "ListCollections", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "GetCollection", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "GetValue", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "GetValues", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "TensorWorkers", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "PrevSteps", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "GetReductions", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "GetHistogram", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "HasPassedStep", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "WaitForSteps", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "WatchSteps", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "ReportRuleStatus", Role::kWrite},
    // A writer's hook stores its collections' configuration.
    {"tensorkeep.v1.TensorKeep", "PutCollections", Role::kWrite},
    {"tensorkeep.v1.TensorKeep", "ListRuleStatuses", Role::kRead},
    {"tensorkeep.v1.TensorKeep", "WatchRuleStatuses", Role::kRead},
    // Completeness stops waiting for the worker: a writer's decision.
    {"tensorkeep.v1.TensorKeep", "DeclareWorkerLost", Role::kWrite},
    // Deletion (and with it retention) is the admin's.
    {"tensorkeep.v1.TensorKeep", "DeleteTrial", Role::kAdmin},
    {"tensorkeep.v1.TensorKeep", "PublishTrial", Role::kAdmin},
    // Probes (load balancers, Kubernetes) carry no token.
    {"grpc.health.v1.Health", "Check", Role::kNone},
    {"grpc.health.v1.Health", "Watch", Role::kNone},
    // Reflection describes the service to tools such as grpcurl.
    {"grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo", Role::kRead},
};

}  // namespace

std::optional<Role> RoleForMethod(std::string_view path) {
  static const auto* table = [] {
    auto* t = new absl::flat_hash_map<std::string, Role>();
    for (const Entry& e : kTable) (*t)[absl::StrCat("/", e.service, "/", e.method)] = e.role;
    return t;
  }();
  auto it = table->find(std::string(path));
  if (it == table->end()) return std::nullopt;
  return it->second;
}

}  // namespace tensorkeep
