// Results of tensorkeep-bench and how they are printed: one line per
// benchmark, db_bench style, with the figure, its same-run baseline, the
// ratio and the target; and the same as JSON (--json FILE).
//
// Line format (fields separated by " | ", parsed by bench/smoke_test.cmake):
//   NAME FIGURE | BASELINE | RATIO | TARGET
// where RATIO is figure / baseline ("1.23x", or "-" without a baseline) and
// TARGET is "target: <what>: met", "...: MISSED" or "-".
//
// Thread safety: none needed (used from the main thread).
#ifndef TENSORKEEP_BENCH_REPORT_H_
#define TENSORKEEP_BENCH_REPORT_H_

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace tensorkeep {
namespace bench {

struct Result {
  enum class Verdict { kNone, kMet, kMissed };

  std::string name;  // "ingest/64KiB/w4"
  // The primary figure and its unit ("MB/s", "us", "ms", "s", "MiB").
  double value = NAN;
  std::string unit;
  std::string figure_text;  // as printed, e.g. "412.3 MB/s 6597 rec/s"
  std::string baseline_name;  // "raw LevelDB"; empty: none
  double baseline = NAN;      // in `unit`
  std::string baseline_text;
  std::string target;  // e.g. ">= 0.80x raw LevelDB"; empty: none
  Verdict verdict = Verdict::kNone;
  // Secondary figures for JSON (e.g. "p99_us", "records_per_s").
  std::map<std::string, double> extra;

  double ratio() const {
    return (std::isnan(baseline) || baseline == 0) ? NAN : value / baseline;
  }
  void Judge(bool met) { verdict = met ? Verdict::kMet : Verdict::kMissed; }
};

// A duration in seconds for a target or figure, with three significant
// digits and no trailing zeros: 2 -> "2 s", 0.2 -> "0.2 s", 0.002 -> "0.002 s",
// 0.0125 -> "0.0125 s" (a fixed "%.2f" would print the last two as "0.00").
std::string SecondsText(double seconds);

// The machine the figures come from (nproc, CPU model, kernel, load).
std::map<std::string, std::string> MachineInfo();

// Prints the header (machine, date, legend).
void PrintHeader(const std::map<std::string, std::string>& machine, bool quick);
// Prints one result line to stdout and flushes.
void PrintResult(const Result& r);
// Writes every result and the machine to `path` as JSON. Returns false (and
// prints why) on failure.
bool WriteJson(const std::string& path, const std::map<std::string, std::string>& machine,
               const std::vector<Result>& results);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_REPORT_H_
