#include "bench/report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "leveldb/db.h"

namespace tensorkeep {
namespace bench {
namespace {

std::string FirstCpuInfo(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "unknown";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

}  // namespace

std::string SecondsText(double seconds) { return absl::StrFormat("%.3g s", seconds); }

std::map<std::string, std::string> MachineInfo() {
  std::map<std::string, std::string> m;
  m["nproc"] = absl::StrCat(sysconf(_SC_NPROCESSORS_ONLN));
  m["cpu_model"] = FirstCpuInfo("model name");
  m["cpu_mhz"] = FirstCpuInfo("cpu MHz");
  struct utsname u;
  if (uname(&u) == 0) m["kernel"] = absl::StrCat(u.sysname, " ", u.release, " ", u.machine);
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) m["loadavg_1m"] = absl::StrFormat("%.2f", load[0]);
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&now));
  m["date"] = date;
  m["leveldb"] = absl::StrCat(leveldb::kMajorVersion, ".", leveldb::kMinorVersion);
  return m;
}

void PrintHeader(const std::map<std::string, std::string>& machine, bool quick) {
  std::printf("tensorkeep-bench%s  %s\n", quick ? " (--quick)" : "", machine.at("date").c_str());
  std::printf("machine: %s CPUs, %s, %s, load %s, LevelDB %s\n", machine.at("nproc").c_str(),
              machine.at("cpu_model").c_str(), machine.count("kernel") ? machine.at("kernel").c_str() : "",
              machine.count("loadavg_1m") ? machine.at("loadavg_1m").c_str() : "?",
              machine.at("leveldb").c_str());
  std::printf("MB = 10^6 bytes; ratio = figure / baseline (throughput: higher is better; "
              "latency and time: lower is better)\n");
  std::printf("%s\n", std::string(118, '-').c_str());
  std::fflush(stdout);
}

void PrintResult(const Result& r) {
  const double ratio = r.ratio();
  std::string ratio_text = std::isnan(ratio) ? "-" : absl::StrFormat("%.2fx", ratio);
  std::string baseline = r.baseline_name.empty()
                             ? "-"
                             : absl::StrCat(r.baseline_name, " ", r.baseline_text);
  std::string target = "-";
  if (!r.target.empty()) {
    target = absl::StrCat("target: ", r.target, ": ",
                          r.verdict == Result::Verdict::kMet
                              ? "met"
                              : (r.verdict == Result::Verdict::kMissed ? "MISSED" : "not judged"));
  }
  std::printf("%-22s %-36s | %-34s | %7s | %s\n", r.name.c_str(), r.figure_text.c_str(),
              baseline.c_str(), ratio_text.c_str(), target.c_str());
  std::fflush(stdout);
}

bool WriteJson(const std::string& path, const std::map<std::string, std::string>& machine,
               const std::vector<Result>& results) {
  std::ostringstream o;
  o << "{\n  \"machine\": {";
  bool first = true;
  for (const auto& [k, v] : machine) {
    o << (first ? "" : ", ") << JsonString(k) << ": " << JsonString(v);
    first = false;
  }
  o << "},\n  \"results\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    o << "    {\"name\": " << JsonString(r.name) << ", \"value\": " << JsonNumber(r.value)
      << ", \"unit\": " << JsonString(r.unit) << ", \"figure\": " << JsonString(r.figure_text)
      << ", \"baseline_name\": " << JsonString(r.baseline_name)
      << ", \"baseline\": " << JsonNumber(r.baseline) << ", \"ratio\": " << JsonNumber(r.ratio())
      << ", \"target\": " << JsonString(r.target) << ", \"met\": "
      << (r.verdict == Result::Verdict::kNone ? "null"
                                              : (r.verdict == Result::Verdict::kMet ? "true"
                                                                                    : "false"))
      << ", \"extra\": {";
    bool f = true;
    for (const auto& [k, v] : r.extra) {
      o << (f ? "" : ", ") << JsonString(k) << ": " << JsonNumber(v);
      f = false;
    }
    o << "}}" << (i + 1 < results.size() ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  std::ofstream out(path);
  out << o.str();
  out.close();
  if (!out) {
    std::fprintf(stderr, "tensorkeep-bench: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace bench
}  // namespace tensorkeep
