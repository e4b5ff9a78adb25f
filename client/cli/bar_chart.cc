#include "client/cli/bar_chart.h"

#include <algorithm>
#include <cstdio>

namespace tensorkeep {
namespace cli {

std::string RenderBarChart(const std::vector<double>& edges, const std::vector<uint64_t>& counts,
                           int width) {
  uint64_t max = 0;
  for (uint64_t c : counts) max = std::max(max, c);
  std::string out;
  char line[128];
  for (size_t i = 0; i < counts.size() && i + 1 < edges.size(); ++i) {
    const bool last = i + 1 == counts.size();
    std::snprintf(line, sizeof(line), "[%12.5g, %12.5g%c %10llu  ", edges[i], edges[i + 1],
                  last ? ']' : ')', static_cast<unsigned long long>(counts[i]));
    out += line;
    const int n = max == 0 ? 0
                           : static_cast<int>((static_cast<double>(counts[i]) / max) * width + 0.5);
    out.append(static_cast<size_t>(n), '#');
    if (n == 0 && counts[i] > 0) out += '.';
    out += '\n';
  }
  return out;
}

}  // namespace cli
}  // namespace tensorkeep
