// Renders a histogram as a horizontal bar chart for the terminal.
#ifndef TENSORKEEP_CLIENT_CLI_BAR_CHART_H_
#define TENSORKEEP_CLIENT_CLI_BAR_CHART_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tensorkeep {
namespace cli {

// One line per bin: "[lo, hi)  count  ####", bars scaled to `width` columns
// for the largest count.
std::string RenderBarChart(const std::vector<double>& edges, const std::vector<uint64_t>& counts,
                           int width = 50);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_BAR_CHART_H_
