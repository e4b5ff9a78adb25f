// AccessControl: who may call what on a collector with --auth-tokens.
//
// Two checks, both from the call's `authorization: Bearer TOKEN` header:
//  * the method's role (method_roles.h), by TokenProcessor, gRPC's
//    AuthMetadataProcessor, before any handler runs: no or an unknown token
//    is UNAUTHENTICATED, too small a role PERMISSION_DENIED;
//  * the trial: a token with trial prefixes acts only on trials whose names
//    start with one. The trial is in the request, so the service asks
//    CallAccess (ForCall) for every trial a request names
//    (TensorKeepService::TrialFor) and filters listings with Sees.
// Reload() swaps in the file's new contents (on SIGHUP); a call already past
// the processor sees the new set in its trial check.
//
// Thread safety: thread-safe.
#ifndef TENSORKEEP_SERVER_ACCESS_ACCESS_CONTROL_H_
#define TENSORKEEP_SERVER_ACCESS_ACCESS_CONTROL_H_

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "server/access/token_set.h"

namespace tensorkeep {

// What one call may touch.
class CallAccess {
 public:
  // Every trial (a collector without tokens).
  static CallAccess Everything(std::string who);
  // Nothing: each trial check fails with `why`.
  static CallAccess Nothing(absl::Status why);
  // A token's reach.
  static CallAccess Of(const TokenEntry& token);

  // OK if the call may act on `trial`, else PERMISSION_DENIED naming the
  // token and its prefixes.
  absl::Status CheckTrial(std::string_view trial) const;
  // Whether `trial` shows in listings.
  bool Sees(std::string_view trial) const { return CheckTrial(trial).ok(); }
  // Who the call is, for logs: the token's NAME, else "anonymous".
  const std::string& who() const { return who_; }

 private:
  std::string who_;
  bool all_ = false;
  std::vector<std::string> prefixes_;
  absl::Status denied_;
};

class AccessControl {
 public:
  // Loads the tokens of `path` (TokenSet's format).
  static absl::StatusOr<std::unique_ptr<AccessControl>> Load(const std::string& path);

  // Reads the file again; on an error the tokens in force stay.
  absl::Status Reload();
  size_t token_count() const;

  // The role check of a call to `path` with the `authorization` header value
  // `authorization` (empty: none).
  grpc::Status Authorize(std::string_view path, std::string_view authorization) const;
  // The same for any caller (the HTTP server): whether `authorization` may
  // do what needs `needed` (`what` names it in messages, `hint` says how to
  // send a token): UNAUTHENTICATED or PERMISSION_DENIED otherwise.
  absl::Status AuthorizeRole(Role needed, std::string_view what, std::string_view authorization,
                             std::string_view hint) const;
  // The trial check of a call (its headers).
  CallAccess ForCall(const grpc::ServerContextBase& context) const;
  // The trial check of a caller with the header value `authorization`.
  CallAccess ForAuthorization(std::string_view authorization) const;

  // The processor to install on the server's credentials.
  std::shared_ptr<grpc::AuthMetadataProcessor> Processor();

 private:
  explicit AccessControl(std::string path) : path_(std::move(path)) {}
  std::shared_ptr<const TokenSet> tokens() const;

  const std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const TokenSet> tokens_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_ACCESS_ACCESS_CONTROL_H_
