// TokenSet: the tokens of an --auth-tokens file. One a line:
//
//   sha256:<64 hex digits> ROLE NAME [TRIAL_PREFIX...]
//
// (`tensorkeep token-new NAME ROLE [PREFIX...]` prints such a line); blank
// lines and lines starting with # are ignored. ROLE is read, write or admin;
// NAME says whose token it is in the logs; with prefixes the token acts only
// on trials whose names start with one of them.
//
// Thread safety: immutable once loaded.
#ifndef TENSORKEEP_SERVER_ACCESS_TOKEN_SET_H_
#define TENSORKEEP_SERVER_ACCESS_TOKEN_SET_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tokens.h"

namespace tensorkeep {

struct TokenEntry {
  TokenDigest digest;
  Role role = Role::kRead;
  std::string name;
  std::vector<std::string> trial_prefixes;  // empty: every trial
};

class TokenSet {
 public:
  // Reads and parses `path`; errors name the file and line.
  static absl::StatusOr<std::shared_ptr<const TokenSet>> Load(const std::string& path);
  // Parses a file's text; `source` names it in errors.
  static absl::StatusOr<std::shared_ptr<const TokenSet>> Parse(std::string_view text,
                                                               const std::string& source);

  // The entry of `token`, or null. Compares the token's SHA-256 with every
  // entry's, each in constant time, so timing says nothing about the tokens.
  const TokenEntry* Find(std::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  std::vector<TokenEntry> entries_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_ACCESS_TOKEN_SET_H_
