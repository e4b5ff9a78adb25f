#include "rules/params.h"

#include <cerrno>
#include <cstdlib>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tensorkeep {
namespace rules {
namespace {

bool IsNone(const std::string& text) {
  std::string t(absl::StripAsciiWhitespace(text));
  return t.empty() || t == "None" || t == "none" || t == "null";
}

std::optional<double> ParseDouble(const std::string& text) {
  std::string t(absl::StripAsciiWhitespace(text));
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || errno == ERANGE) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseInt(const std::string& text) {
  std::string t(absl::StripAsciiWhitespace(text));
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(t.c_str(), &end, 10);
  if (end != t.c_str() + t.size() || errno == ERANGE) return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace

RuleParams::RuleParams(std::string rule, std::map<std::string, std::string> values)
    : rule_(std::move(rule)), values_(std::move(values)) {}

std::optional<std::string> RuleParams::Raw(const std::string& name) {
  known_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::Status RuleParams::Invalid(const std::string& name, const std::string& why) const {
  auto it = values_.find(name);
  std::string given = it == values_.end() ? "" : absl::StrCat(" '", it->second, "'");
  return absl::InvalidArgumentError(
      absl::StrCat("rule ", rule_, ": parameter ", name, given, ": ", why));
}

absl::StatusOr<double> RuleParams::Double(const std::string& name, double fallback) {
  auto raw = Raw(name);
  if (!raw.has_value()) return fallback;
  auto v = ParseDouble(*raw);
  if (!v.has_value()) return Invalid(name, "not a number");
  return *v;
}

absl::StatusOr<std::optional<double>> RuleParams::OptionalDouble(const std::string& name) {
  auto raw = Raw(name);
  if (!raw.has_value() || IsNone(*raw)) return std::optional<double>();
  auto v = ParseDouble(*raw);
  if (!v.has_value()) return Invalid(name, "not a number (or None)");
  return v;
}

absl::StatusOr<int64_t> RuleParams::Int(const std::string& name, int64_t fallback) {
  auto raw = Raw(name);
  if (!raw.has_value()) return fallback;
  auto v = ParseInt(*raw);
  if (!v.has_value()) return Invalid(name, "not an integer");
  return *v;
}

absl::StatusOr<std::optional<int64_t>> RuleParams::OptionalInt(const std::string& name) {
  auto raw = Raw(name);
  if (!raw.has_value() || IsNone(*raw)) return std::optional<int64_t>();
  auto v = ParseInt(*raw);
  if (!v.has_value()) return Invalid(name, "not an integer (or None)");
  return v;
}

absl::StatusOr<bool> RuleParams::Bool(const std::string& name, bool fallback) {
  auto raw = Raw(name);
  if (!raw.has_value()) return fallback;
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*raw));
  if (t == "true" || t == "1" || t == "yes") return true;
  if (t == "false" || t == "0" || t == "no") return false;
  return Invalid(name, "not a boolean (True or False)");
}

std::string RuleParams::String(const std::string& name, const std::string& fallback) {
  auto raw = Raw(name);
  return raw.has_value() ? *raw : fallback;
}

std::optional<std::string> RuleParams::OptionalString(const std::string& name) {
  auto raw = Raw(name);
  if (!raw.has_value() || IsNone(*raw)) return std::nullopt;
  return raw;
}

std::vector<std::string> RuleParams::List(const std::string& name,
                                          const std::vector<std::string>& fallback) {
  auto raw = Raw(name);
  if (!raw.has_value() || IsNone(*raw)) return fallback;
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(*raw, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (!item.empty()) out.emplace_back(item);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> RuleParams::Regexes(
    const std::string& name, const std::vector<std::string>& fallback) {
  std::vector<std::string> out = List(name, fallback);
  for (const std::string& r : out) {
    // std::regex reports errors only by throwing; keep that inside.
    try {
      std::regex compiled(r, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return Invalid(name, absl::StrCat("invalid regex '", r, "': ", e.what()));
    }
  }
  return out;
}

absl::StatusOr<std::vector<double>> RuleParams::DoubleList(const std::string& name,
                                                           const std::vector<double>& fallback) {
  auto raw = Raw(name);
  if (!raw.has_value() || IsNone(*raw)) return fallback;
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(*raw, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    auto v = ParseDouble(std::string(item));
    if (!v.has_value()) return Invalid(name, absl::StrCat("'", item, "' is not a number"));
    out.push_back(*v);
  }
  if (out.empty()) return Invalid(name, "empty list");
  return out;
}

absl::StatusOr<std::pair<double, double>> RuleParams::Range(const std::string& name,
                                                            std::pair<double, double> fallback) {
  auto raw = Raw(name);
  if (!raw.has_value()) return fallback;
  absl::string_view t = absl::StripAsciiWhitespace(*raw);
  if (!t.empty() && (t.front() == '(' || t.front() == '[')) t.remove_prefix(1);
  if (!t.empty() && (t.back() == ')' || t.back() == ']')) t.remove_suffix(1);
  std::vector<std::string> parts = absl::StrSplit(t, ',');
  if (parts.size() != 2) return Invalid(name, "expected a pair \"(lo, hi)\"");
  auto lo = ParseDouble(parts[0]);
  auto hi = ParseDouble(parts[1]);
  if (!lo.has_value() || !hi.has_value()) return Invalid(name, "expected two numbers \"(lo, hi)\"");
  if (!(*lo < *hi)) return Invalid(name, "expected lo < hi");
  return std::make_pair(*lo, *hi);
}

absl::Status RuleParams::Finish() const {
  std::vector<std::string> unknown;
  for (const auto& [k, v] : values_) {
    if (known_.count(k) == 0) unknown.push_back(k);
  }
  if (unknown.empty()) return absl::OkStatus();
  std::vector<std::string> known(known_.begin(), known_.end());
  return absl::InvalidArgumentError(
      absl::StrCat("rule ", rule_, ": unknown parameter", unknown.size() > 1 ? "s " : " ",
                   absl::StrJoin(unknown, ", "),
                   " (known: ", known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
}

absl::StatusOr<std::pair<std::string, std::string>> ParseParamAssignment(const std::string& text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", text, "' is not of the form name=value"));
  }
  return std::make_pair(std::string(absl::StripAsciiWhitespace(text.substr(0, eq))),
                        text.substr(eq + 1));
}

}  // namespace rules
}  // namespace tensorkeep
