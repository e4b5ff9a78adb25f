// ProgressBar: "importing [#########.........]  45/100 files" redrawn in place
// on stderr when it is a terminal; silent otherwise (logs stay clean).
#ifndef TENSORKEEP_CLIENT_CLI_PROGRESS_BAR_H_
#define TENSORKEEP_CLIENT_CLI_PROGRESS_BAR_H_

#include <cstdint>
#include <string>

namespace tensorkeep {
namespace cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total, std::string unit);
  ~ProgressBar() { Done(); }
  void Update(uint64_t done);
  // Ends the line (once).
  void Done();

 private:
  std::string label_, unit_;
  uint64_t total_;
  bool tty_;
  bool drawn_ = false;
  int last_width_ = -1;
};

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_PROGRESS_BAR_H_
