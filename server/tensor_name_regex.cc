#include "server/tensor_name_regex.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/validation.h"

namespace tensorkeep {

namespace {

// The memory all regexes of one tensor_names call may use: compiled programs
// plus the DFA caches matching fills (RE2 falls back to its slower, still
// linear NFA when the cache is full). RE2's default for one regex.
constexpr int64_t kRegexMemoryBytes = 8 << 20;

// What RE2's refusal of `pattern` means for someone who wrote it for
// Python's re.
std::string RegexHint(const RE2& re) {
  const std::string& arg = re.error_arg();
  if (re.error_code() == RE2::ErrorBadEscape && arg.size() >= 2 && arg[0] == '\\' &&
      arg[1] >= '1' && arg[1] <= '9') {
    return "backreferences are not supported (RE2 syntax)";
  }
  if (re.error_code() == RE2::ErrorBadPerlOp && re.pattern().find("(?P=") != std::string::npos) {
    return "backreferences are not supported (RE2 syntax)";
  }
  if (re.error_code() == RE2::ErrorBadPerlOp) {
    if (absl::StartsWith(arg, "(?=") || absl::StartsWith(arg, "(?!") ||
        absl::StartsWith(arg, "(?<")) {
      return "lookahead and lookbehind are not supported (RE2 syntax)";
    }
  }
  if (re.error_code() == RE2::ErrorPatternTooLarge) {
    return "the pattern is too large or complex; simplify it";
  }
  return "regexes use RE2 syntax: no backreferences or lookaround";
}

}  // namespace

// The callers' regexes compiled with RE2 (linear-time matching, bounded
// memory, no recursion on the pattern's nesting), or BAD_REQUEST naming the
// first one RE2 refuses and why.
absl::StatusOr<std::vector<std::unique_ptr<RE2>>> CompileRegexes(
    const std::vector<std::string>& regexes) {
  TK_RETURN_IF_ERROR(ValidateRegexes(regexes));
  std::vector<std::unique_ptr<RE2>> out;
  if (regexes.empty()) return out;
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(kRegexMemoryBytes / static_cast<int64_t>(regexes.size()));
  for (const std::string& r : regexes) {
    auto re = std::make_unique<RE2>(r, options);
    if (!re->ok()) {
      return MakeError(Reason::kBadRequest,
                       absl::StrCat("invalid regex ", QuoteInput(r), ": ",
                                    QuoteInput(re->error(), 200), "; ", RegexHint(*re)));
    }
    out.push_back(std::move(re));
  }
  return out;
}

}  // namespace tensorkeep
