#include "client/cli/args.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tensorkeep {
namespace cli {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv,
                                 const std::set<std::string>& value_flags,
                                 const std::set<std::string>& bool_flags) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string flag = a.substr(2);
      std::optional<std::string> value;
      const size_t eq = flag.find('=');
      if (eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
      }
      if (bool_flags.count(flag)) {
        if (value.has_value()) {
          return absl::InvalidArgumentError(absl::StrCat("--", flag, " takes no value"));
        }
        args.values_[flag].push_back("true");
      } else if (value_flags.count(flag)) {
        if (!value.has_value()) {
          if (i + 1 >= argv.size()) {
            return absl::InvalidArgumentError(absl::StrCat("--", flag, " needs a value"));
          }
          value = argv[++i];
        }
        args.values_[flag].push_back(*value);
      } else {
        return absl::InvalidArgumentError(absl::StrCat("unknown option --", flag));
      }
    } else {
      args.positional_.push_back(a);
    }
  }
  return args;
}

std::optional<std::string> Args::Get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::GetAll(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>() : it->second;
}

absl::StatusOr<std::optional<uint64_t>> Args::GetUint(const std::string& flag) const {
  auto v = Get(flag);
  if (!v.has_value()) return std::optional<uint64_t>();
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v->c_str(), &end, 10);
  if (v->empty() || (*v)[0] == '-' || *end != '\0' || errno != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be a non-negative integer, got '", *v, "'"));
  }
  return std::optional<uint64_t>(n);
}

absl::StatusOr<std::optional<double>> Args::GetDouble(const std::string& flag) const {
  auto v = Get(flag);
  if (!v.has_value()) return std::optional<double>();
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0') {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be a number, got '", *v, "'"));
  }
  return std::optional<double>(d);
}

}  // namespace cli
}  // namespace tensorkeep
