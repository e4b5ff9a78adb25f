// The regexes of ListTensorNames (tensor_names(regex=...)): compiled with
// RE2, whose matching takes linear time and bounded memory and whose parser
// does not recurse on a pattern's nesting, so that no client's pattern can
// freeze or crash the collector (issue 11). Python's re.search semantics:
// a name matches when any pattern matches part of it.
#ifndef TENSORKEEP_SERVER_TENSOR_NAME_REGEX_H_
#define TENSORKEEP_SERVER_TENSOR_NAME_REGEX_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "re2/re2.h"

namespace tensorkeep {

// The callers' regexes compiled with RE2 (linear-time matching, bounded
// memory, no recursion on the pattern's nesting), or BAD_REQUEST naming the
// first one RE2 refuses and why.
absl::StatusOr<std::vector<std::unique_ptr<RE2>>> CompileRegexes(
    const std::vector<std::string>& regexes);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_TENSOR_NAME_REGEX_H_
