// The subcommands of the tensorkeep CLI. Each takes the parsed arguments after
// the subcommand name, prints results to stdout and returns the exit code
// (0 ok, 1 the operation failed, 2 usage error); errors go to stderr.
#ifndef TENSORKEEP_CLIENT_CLI_COMMANDS_H_
#define TENSORKEEP_CLIENT_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace tensorkeep {
namespace cli {

// Runs `tensorkeep ARGS...` (argv without the program name).
int RunCli(const std::vector<std::string>& argv);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_COMMANDS_H_
