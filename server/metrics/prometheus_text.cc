#include "server/metrics/prometheus_text.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tensorkeep {
namespace {

// HELP text escapes \ and newline; label values also ".
std::string Escape(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.17g", v);
}

}  // namespace

void PrometheusText::Family(const std::string& name, const std::string& type,
                            const std::string& help) {
  absl::StrAppend(&out_, "# HELP ", name, " ", Escape(help, false), "\n", "# TYPE ", name, " ",
                  type, "\n");
}

void PrometheusText::Sample(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&out_, i == 0 ? "" : ",", labels[i].first, "=\"",
                      Escape(labels[i].second, true), "\"");
    }
    out_ += '}';
  }
  absl::StrAppend(&out_, " ", FormatValue(value), "\n");
}

void PrometheusText::HistogramFamily(const std::string& name, const std::string& help,
                                     const BucketHistogram::Snapshot& s) {
  Family(name, "histogram", help);
  const std::string bucket = absl::StrCat(name, "_bucket");
  for (size_t i = 0; i < s.bounds.size(); ++i) {
    Sample(bucket, {{"le", absl::StrFormat("%g", s.bounds[i])}},
           static_cast<double>(s.cumulative[i]));
  }
  Sample(bucket, {{"le", "+Inf"}}, static_cast<double>(s.count));
  Sample(absl::StrCat(name, "_sum"), s.sum);
  Sample(absl::StrCat(name, "_count"), static_cast<double>(s.count));
}

}  // namespace tensorkeep
