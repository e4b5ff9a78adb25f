// Args: the command line of the tensorkeep CLI — positional arguments and
// --flags (with values, repeatable, or boolean) — with errors a person can act on.
#ifndef TENSORKEEP_CLIENT_CLI_ARGS_H_
#define TENSORKEEP_CLIENT_CLI_ARGS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorkeep {
namespace cli {

class Args {
 public:
  // `value_flags` take a value ("--step 3" or "--step=3"); `bool_flags` don't.
  // Any other --flag is an error.
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::set<std::string>& value_flags,
                                    const std::set<std::string>& bool_flags);

  const std::vector<std::string>& positional() const { return positional_; }
  bool Has(const std::string& flag) const { return values_.count(flag) > 0; }
  // The last value of `flag`, if given.
  std::optional<std::string> Get(const std::string& flag) const;
  std::vector<std::string> GetAll(const std::string& flag) const;
  // The value as an unsigned integer; InvalidArgument names the flag.
  absl::StatusOr<std::optional<uint64_t>> GetUint(const std::string& flag) const;
  absl::StatusOr<std::optional<double>> GetDouble(const std::string& flag) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_ARGS_H_
