// tensorkeep: the command-line client of a tensorkeep collector.
#include <string>
#include <vector>

#include "client/cli/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return tensorkeep::cli::RunCli(args);
}
