#include "server/access/access_control.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/access/method_roles.h"

namespace tensorkeep {
namespace {

constexpr std::string_view kBearer = "Bearer ";

// The token of an authorization header, or "" if it is not a bearer token.
std::string_view BearerToken(std::string_view authorization) {
  if (authorization.substr(0, kBearer.size()) != kBearer) return {};
  return authorization.substr(kBearer.size());
}

// The gRPC face of AccessControl::Authorize, run by gRPC before a call's
// handler (non-blocking: a hash and a table lookup).
class TokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(const AccessControl* access) : access_(access) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    auto path = metadata.find(":path");
    auto auth = metadata.find("authorization");
    return access_->Authorize(
        path == metadata.end() ? std::string_view()
                               : std::string_view(path->second.data(), path->second.size()),
        auth == metadata.end() ? std::string_view()
                               : std::string_view(auth->second.data(), auth->second.size()));
  }

 private:
  const AccessControl* const access_;
};

}  // namespace

CallAccess CallAccess::Everything(std::string who) {
  CallAccess a;
  a.who_ = std::move(who);
  a.all_ = true;
  return a;
}

CallAccess CallAccess::Nothing(absl::Status why) {
  CallAccess a;
  a.who_ = "anonymous";
  a.denied_ = std::move(why);
  return a;
}

CallAccess CallAccess::Of(const TokenEntry& token) {
  CallAccess a;
  a.who_ = token.name;
  a.all_ = token.trial_prefixes.empty();
  a.prefixes_ = token.trial_prefixes;
  return a;
}

absl::Status CallAccess::CheckTrial(std::string_view trial) const {
  if (all_) return absl::OkStatus();
  if (!denied_.ok()) return denied_;
  for (const auto& p : prefixes_) {
    if (trial.substr(0, p.size()) == p) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("token '", who_, "' may act only on trials starting with ",
                   absl::StrJoin(prefixes_, " or "), ", not on '", std::string(trial), "'"));
}

absl::StatusOr<std::unique_ptr<AccessControl>> AccessControl::Load(const std::string& path) {
  std::unique_ptr<AccessControl> a(new AccessControl(path));
  auto tokens = TokenSet::Load(path);
  if (!tokens.ok()) return tokens.status();
  a->tokens_ = std::move(*tokens);
  return a;
}

absl::Status AccessControl::Reload() {
  auto tokens = TokenSet::Load(path_);
  if (!tokens.ok()) return tokens.status();
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = std::move(*tokens);
  return absl::OkStatus();
}

std::shared_ptr<const TokenSet> AccessControl::tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_;
}

size_t AccessControl::token_count() const { return tokens()->size(); }

grpc::Status AccessControl::Authorize(std::string_view path, std::string_view authorization) const {
  const std::optional<Role> needed = RoleForMethod(path);
  if (!needed.has_value()) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("method '", std::string(path),
                                     "' has no role in the collector's table; refused to all"));
  }
  const absl::Status status =
      AuthorizeRole(*needed, path, authorization, "pass --token TOKEN or set TENSORKEEP_TOKEN");
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status AccessControl::AuthorizeRole(Role needed, std::string_view what,
                                          std::string_view authorization,
                                          std::string_view hint) const {
  if (needed == Role::kNone) return absl::OkStatus();
  if (authorization.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("this collector needs a token (",
                                                   RoleName(needed), " role or more for ",
                                                   std::string(what), "): ", std::string(hint)));
  }
  const std::string_view token = BearerToken(authorization);
  const TokenEntry* entry = token.empty() ? nullptr : tokens()->Find(token);
  if (entry == nullptr) {
    return absl::UnauthenticatedError(
        "the token is not one this collector knows (revoked, mistyped, or for another "
        "collector)");
  }
  if (entry->role < needed) {
    return absl::PermissionDeniedError(absl::StrCat("token '", entry->name, "' has role ",
                                                    RoleName(entry->role), "; ", std::string(what), " needs ",
                                                    RoleName(needed)));
  }
  return absl::OkStatus();
}

CallAccess AccessControl::ForCall(const grpc::ServerContextBase& context) const {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  return ForAuthorization(it == md.end() ? std::string_view()
                                         : std::string_view(it->second.data(), it->second.size()));
}

CallAccess AccessControl::ForAuthorization(std::string_view authorization) const {
  const std::string_view token = BearerToken(authorization);
  const auto set = tokens();
  const TokenEntry* entry = token.empty() ? nullptr : set->Find(token);
  if (entry == nullptr) {
    return CallAccess::Nothing(absl::UnauthenticatedError(
        "the token is not one this collector knows (revoked, mistyped, or for another "
        "collector)"));
  }
  return CallAccess::Of(*entry);
}

std::shared_ptr<grpc::AuthMetadataProcessor> AccessControl::Processor() {
  return std::make_shared<TokenProcessor>(this);
}

}  // namespace tensorkeep
