// ChildArgv: the path and argv of a child process to execv after fork(),
// built before the fork. The child of a threaded process (every test binary
// with a gRPC server or client in it) may only make async-signal-safe calls
// until execv: a malloc there can wait forever on a lock another thread held
// at the fork (under ASan a rule worker hung so, printing nothing, in 1 run
// of ~100).
#ifndef TENSORKEEP_TESTS_SERVER_CHILD_ARGV_H_
#define TENSORKEEP_TESTS_SERVER_CHILD_ARGV_H_

#include <string>
#include <utility>
#include <vector>

namespace tensorkeep {
namespace testing {

class ChildArgv {
 public:
  ChildArgv(std::string binary, std::vector<std::string> args)
      : binary_(std::move(binary)), args_(std::move(args)) {
    argv_.push_back(binary_.data());
    for (std::string& a : args_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
  }
  ChildArgv(const ChildArgv&) = delete;
  ChildArgv& operator=(const ChildArgv&) = delete;

  const char* path() const { return binary_.c_str(); }
  char* const* argv() const { return argv_.data(); }

 private:
  std::string binary_;
  std::vector<std::string> args_;
  std::vector<char*> argv_;
};

}  // namespace testing
}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_SERVER_CHILD_ARGV_H_
