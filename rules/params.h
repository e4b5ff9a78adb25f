// RuleParams: a rule's parameters, every one given as a string (as SageMaker
// passes them), parsed into typed values with their defaults.
//
// A rule's factory reads each parameter it knows once, then calls Finish(),
// which rejects the names it did not read. Every error is InvalidArgument
// naming the rule and the parameter.
//
// Accepted spellings: numbers as strtod/strtoll read them (the whole string);
// booleans True/False, true/false, 1/0, yes/no; "None" (or "") for an optional
// value left unset; lists comma-separated ("a, b" → {"a", "b"}); ranges as
// "(lo, hi)", "[lo, hi]" or "lo,hi".
//
// Thread safety: none; used while building one rule.
#ifndef TENSORKEEP_RULES_PARAMS_H_
#define TENSORKEEP_RULES_PARAMS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensorkeep {
namespace rules {

class RuleParams {
 public:
  // `rule` names the rule in error messages.
  RuleParams(std::string rule, std::map<std::string, std::string> values);

  // Each getter marks `name` as known and returns the parsed value, or
  // `fallback` when the parameter was not given.
  absl::StatusOr<double> Double(const std::string& name, double fallback);
  // Like Double; absent, "" or "None" give nullopt.
  absl::StatusOr<std::optional<double>> OptionalDouble(const std::string& name);
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback);
  // Like Int; absent, "" or "None" give nullopt.
  absl::StatusOr<std::optional<int64_t>> OptionalInt(const std::string& name);
  absl::StatusOr<bool> Bool(const std::string& name, bool fallback);
  std::string String(const std::string& name, const std::string& fallback);
  // Absent, "" or "None" give nullopt.
  std::optional<std::string> OptionalString(const std::string& name);
  // A comma-separated list, items trimmed, empty items dropped; absent or
  // "None" give `fallback`.
  std::vector<std::string> List(const std::string& name,
                                const std::vector<std::string>& fallback = {});
  // Like List, each item checked to be a valid regex (ECMAScript syntax, as
  // the collector matches them).
  absl::StatusOr<std::vector<std::string>> Regexes(const std::string& name,
                                                   const std::vector<std::string>& fallback = {});
  // A comma-separated list of numbers.
  absl::StatusOr<std::vector<double>> DoubleList(const std::string& name,
                                                 const std::vector<double>& fallback);
  // A pair "(lo, hi)" with lo < hi.
  absl::StatusOr<std::pair<double, double>> Range(const std::string& name,
                                                  std::pair<double, double> fallback);

  // An InvalidArgument error about parameter `name`.
  absl::Status Invalid(const std::string& name, const std::string& why) const;
  // InvalidArgument naming every parameter given that no getter asked for,
  // and listing the known ones; OK if none.
  absl::Status Finish() const;

 private:
  // The raw value of `name` (marking it known), nullopt if absent.
  std::optional<std::string> Raw(const std::string& name);

  std::string rule_;
  std::map<std::string, std::string> values_;
  std::set<std::string> known_;
};

// Parses "k=v" into (k, v); InvalidArgument when there is no '=' or no key.
absl::StatusOr<std::pair<std::string, std::string>> ParseParamAssignment(const std::string& text);

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_PARAMS_H_
