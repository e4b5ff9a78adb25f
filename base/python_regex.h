// Python's re patterns (collections' include_regex, written by smdebug's and
// tensorkeep's hooks) as RE2 reads them. RE2 matches in linear time with
// bounded memory; it lacks Python's lookaround ((?=, (?!, (?<=, (?<!) and
// backreferences (\1, (?P=name)), which smdebug's built-in collections use
// (weights: "^(?!gradient).*weight"). Such a regex is "Python-only": valid,
// stored as written, matched by the Python client and skipped by the
// collector and the C++ client (docs/python.md, "Collections").
#ifndef TENSORKEEP_BASE_PYTHON_REGEX_H_
#define TENSORKEEP_BASE_PYTHON_REGEX_H_

#include <memory>
#include <string>

#include "re2/re2.h"

namespace tensorkeep {

// Memory one collection regex may use compiled (program and DFA cache).
inline constexpr int64_t kPythonRegexMemoryBytes = 1 << 20;

enum class PythonRegexKind {
  kRe2,         // RE2 runs it as Python's re would
  kPythonOnly,  // valid but for lookaround or backreferences
  kInvalid,     // RE2 refuses it even without those
};

struct PythonRegexCheck {
  PythonRegexKind kind;
  std::string error;  // RE2's message, for kInvalid
};

PythonRegexCheck CheckPythonRegex(const std::string& regex);

// `regex` compiled with RE2 (re.search semantics with RE2::PartialMatch), or
// nullptr when it is Python-only or invalid.
std::unique_ptr<RE2> CompilePythonRegex(const std::string& regex);

// `regex` with Python's lookaround and backreferences replaced by empty
// groups (*replaced says whether there were any): what RE2 must accept for
// the rest of it to be valid. Escaped characters are copied as they are.
std::string WithoutPythonOnly(const std::string& regex, bool* replaced);

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_PYTHON_REGEX_H_
