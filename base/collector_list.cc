#include "base/collector_list.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/errors.h"

namespace tensorkeep {

bool IsHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  uint32_t n = 0;
  if (port.empty() || port.size() > 5 || !absl::SimpleAtoi(port, &n) || n == 0 || n > 65535) {
    return false;
  }
  for (char c : port) {
    if (c < '0' || c > '9') return false;
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return false;
    for (char c : host.substr(1, host.size() - 2)) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
        return false;
      }
    }
    return true;
  }
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> ParseCollectorList(absl::string_view text,
                                                            absl::string_view what) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " ", QuoteInput(text), " has an empty item: expected HOST:PORT,HOST:PORT,..."));
    }
    if (!IsHostPort(item)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", QuoteInput(item), " is not HOST:PORT"));
    }
    if (!seen.insert(std::string(item)).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, " lists ", QuoteInput(item),
                                                     " twice: each collector once"));
    }
    out.emplace_back(item);
  }
  return out;
}

}  // namespace tensorkeep
