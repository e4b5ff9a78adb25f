// The built-in rules by name: SageMaker Debugger's names, parameters and
// defaults (docs/rules.md).
//
// Thread safety: the functions here are thread-safe; the rules they create
// are not (see Rule).
#ifndef TENSORKEEP_RULES_REGISTRY_H_
#define TENSORKEEP_RULES_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/trial.h"
#include "rules/rule.h"

namespace tensorkeep {
namespace rules {

// A built-in rule: its name and a one-line description.
struct BuiltinRuleInfo {
  std::string name;
  std::string summary;
};

// Every built-in rule, in alphabetical order.
const std::vector<BuiltinRuleInfo>& BuiltinRules();

// Creates the built-in rule `name` (exact, case-sensitive) on `base_trial`
// (and `other_trials`, for rules that compare trials) with `params`, every
// value a string. Returns NotFound listing the known names for an unknown
// rule, and InvalidArgument naming the parameter for an unknown parameter
// or a value that does not parse or is out of range.
absl::StatusOr<std::unique_ptr<Rule>> CreateRule(const std::string& name,
                                                 const std::map<std::string, std::string>& params,
                                                 client::Trial base_trial,
                                                 std::vector<client::Trial> other_trials = {});

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_REGISTRY_H_
