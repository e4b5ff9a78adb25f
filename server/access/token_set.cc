#include "server/access/token_set.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensorkeep {

absl::StatusOr<std::shared_ptr<const TokenSet>> TokenSet::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::InvalidArgumentError(absl::StrCat("cannot read --auth-tokens '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

absl::StatusOr<std::shared_ptr<const TokenSet>> TokenSet::Parse(std::string_view text,
                                                                const std::string& source) {
  auto set = std::make_shared<TokenSet>();
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty() || fields[0][0] == '#') continue;
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ":", line_no, ": ", why,
          " (a line is `sha256:<hex> ROLE NAME [TRIAL_PREFIX...]`, from `tensorkeep token-new`)"));
    };
    if (fields.size() < 3) return bad("fewer than 3 fields");
    TokenEntry e;
    if (!ParseTokenHash(fields[0], &e.digest)) {
      return bad(
          "the first field is not sha256: and 64 hex digits (the file holds hashes, "
          "never tokens)");
    }
    auto role = ParseRole(fields[1]);
    if (!role.has_value()) {
      return bad(absl::StrCat("unknown role '", fields[1], "' (read, write or admin)"));
    }
    e.role = *role;
    e.name = std::string(fields[2]);
    for (size_t i = 3; i < fields.size(); ++i) e.trial_prefixes.emplace_back(fields[i]);
    for (const auto& other : set->entries_) {
      if (DigestsEqual(other.digest, e.digest)) {
        return bad(absl::StrCat("the same token as '", other.name, "'"));
      }
    }
    set->entries_.push_back(std::move(e));
  }
  return std::shared_ptr<const TokenSet>(std::move(set));
}

const TokenEntry* TokenSet::Find(std::string_view token) const {
  const TokenDigest digest = Sha256(token);
  const TokenEntry* found = nullptr;
  for (const auto& e : entries_) {
    if (DigestsEqual(e.digest, digest)) found = &e;  // no early exit
  }
  return found;
}

}  // namespace tensorkeep
