// A parser of Prometheus' text exposition format (0.0.4) for the tests, written
// from the format's description, independent of the server's writer: it
// checks that every sample belongs to a family announced by # HELP and # TYPE
// and returns the samples by name and labels.
#ifndef TENSORKEEP_TESTS_SERVER_PROMETHEUS_PARSE_H_
#define TENSORKEEP_TESTS_SERVER_PROMETHEUS_PARSE_H_

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

namespace tensorkeep {
namespace testing {

struct ParsedMetrics {
  std::map<std::string, std::string> help, type;  // by family
  // "name{a=\"x\",b=\"y\"}" (labels as written, in order) -> value
  std::map<std::string, double> samples;
  std::string error;  // empty when the text parsed

  bool has(const std::string& key) const { return samples.count(key) > 0; }
  double at(const std::string& key) const {
    auto it = samples.find(key);
    return it == samples.end() ? -1 : it->second;
  }
};

inline ParsedMetrics ParsePrometheusText(const std::string& text) {
  ParsedMetrics out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  auto fail = [&](const std::string& why) {
    if (out.error.empty()) out.error = "line " + std::to_string(n) + ": " + why + ": " + line;
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line);
      std::string hash, kind, family;
      words >> hash >> kind >> family;
      std::string rest;
      std::getline(words, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "HELP") {
        out.help[family] = rest;
      } else if (kind == "TYPE") {
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped") {
          fail("unknown type");
        }
        if (out.type.count(family)) fail("family typed twice");
        out.type[family] = rest;
      }
      continue;
    }
    // name[{labels}] value
    size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) {
      fail("no value");
      continue;
    }
    const std::string name = line.substr(0, name_end);
    size_t value_start = name_end;
    if (line[name_end] == '{') {
      // Label values are quoted and may hold escaped quotes.
      bool quoted = false;
      size_t i = name_end + 1;
      for (; i < line.size(); ++i) {
        if (quoted && line[i] == '\\') {
          ++i;
        } else if (line[i] == '"') {
          quoted = !quoted;
        } else if (!quoted && line[i] == '}') {
          break;
        }
      }
      if (i >= line.size()) {
        fail("unterminated labels");
        continue;
      }
      value_start = i + 1;
    }
    const std::string key = line.substr(0, value_start);
    std::string value = line.substr(value_start);
    while (!value.empty() && value[0] == ' ') value.erase(0, 1);
    char* end = nullptr;
    double v = 0;
    if (value == "+Inf") {
      v = HUGE_VAL;
    } else if (value == "NaN") {
      v = NAN;
    } else {
      v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0') fail("bad value");
    }
    // The family: the name, or the name less a histogram's suffix.
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (!out.type.count(family) && name.size() > s.size() &&
          name.compare(name.size() - s.size(), s.size(), s) == 0) {
        family = name.substr(0, name.size() - s.size());
      }
    }
    if (!out.type.count(family) || !out.help.count(family)) fail("sample without HELP and TYPE");
    if (out.samples.count(key)) fail("sample repeated");
    out.samples[key] = v;
  }
  return out;
}

}  // namespace testing
}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_SERVER_PROMETHEUS_PARSE_H_
