#include "base/python_regex.h"

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace tensorkeep {
namespace {

RE2::Options RegexOptions() {
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(kPythonRegexMemoryBytes);
  return options;
}

}  // namespace

std::string WithoutPythonOnly(const std::string& regex, bool* replaced) {
  std::string out;
  out.reserve(regex.size());
  *replaced = false;
  size_t i = 0;
  while (i < regex.size()) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size()) {
      if (regex[i + 1] >= '1' && regex[i + 1] <= '9') {  // \1: a backreference
        out += "(?:)";
        *replaced = true;
        i += 2;
        while (i < regex.size() && regex[i] >= '0' && regex[i] <= '9') ++i;
        continue;
      }
      out.append(regex, i, 2);
      i += 2;
      continue;
    }
    const absl::string_view rest(regex.data() + i, regex.size() - i);
    if (absl::StartsWith(rest, "(?<=") || absl::StartsWith(rest, "(?<!")) {
      out += "(?:";
      *replaced = true;
      i += 4;
      continue;
    }
    if (absl::StartsWith(rest, "(?=") || absl::StartsWith(rest, "(?!")) {
      out += "(?:";
      *replaced = true;
      i += 3;
      continue;
    }
    if (absl::StartsWith(rest, "(?P=")) {  // (?P=name): a backreference
      const size_t close = regex.find(')', i);
      if (close != std::string::npos) {
        out += "(?:)";
        *replaced = true;
        i = close + 1;
        continue;
      }
    }
    out += c;
    ++i;
  }
  return out;
}

PythonRegexCheck CheckPythonRegex(const std::string& regex) {
  RE2 re(regex, RegexOptions());
  if (re.ok()) return {PythonRegexKind::kRe2, ""};
  bool replaced = false;
  const std::string rest = WithoutPythonOnly(regex, &replaced);
  if (replaced) {
    RE2 without(rest, RegexOptions());
    if (without.ok()) return {PythonRegexKind::kPythonOnly, ""};
    return {PythonRegexKind::kInvalid, without.error()};
  }
  return {PythonRegexKind::kInvalid, re.error()};
}

std::unique_ptr<RE2> CompilePythonRegex(const std::string& regex) {
  auto re = std::make_unique<RE2>(regex, RegexOptions());
  if (!re->ok()) return nullptr;
  return re;
}

}  // namespace tensorkeep
