#include "client/cli/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace tensorkeep {
namespace cli {

constexpr int kWidth = 30;

ProgressBar::ProgressBar(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), tty_(isatty(2) != 0) {}

void ProgressBar::Update(uint64_t done) {
  if (!tty_ || total_ == 0) return;
  const int filled = static_cast<int>(done * kWidth / total_);
  if (filled == last_width_ && done != total_) return;
  last_width_ = filled;
  std::fprintf(stderr, "\r%s [%s%s] %llu/%llu %s", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total_), unit_.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Done() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace cli
}  // namespace tensorkeep
