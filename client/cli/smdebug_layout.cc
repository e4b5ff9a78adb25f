#include "client/cli/smdebug_layout.h"

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tensorkeep {
namespace cli {
namespace smdebug {

std::string EventFilePath(uint64_t step, const std::string& worker) {
  return absl::StrFormat("events/%012d/%012d_%s.tfevents", step, step, worker);
}

std::string IndexFilePath(uint64_t step, const std::string& worker) {
  return absl::StrFormat("index/%09d/%012d_%s.json", step / 1000, step, worker);
}

std::string CollectionsFilePath(const std::string& worker) {
  return absl::StrFormat("collections/000000000/%s_collections.json", worker);
}

std::optional<StepFile> ParseEventFileName(const std::string& file_name) {
  const std::string suffix = ".tfevents";
  if (!absl::EndsWith(file_name, suffix)) return std::nullopt;
  const std::string name = file_name.substr(0, file_name.size() - suffix.size());
  const size_t us = name.find('_');
  if (us == std::string::npos || us == 0 || us + 1 >= name.size()) return std::nullopt;
  for (size_t i = 0; i < us; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
  }
  StepFile f;
  if (!absl::SimpleAtoi(name.substr(0, us), &f.step)) return std::nullopt;
  f.worker = name.substr(us + 1);
  return f;
}

std::string ReductionTensorName(const std::string& tensor, const std::string& reduction, bool abs) {
  return absl::StrCat(kReductionsPrefix, abs ? "abs_" : "", reduction, "/", tensor);
}

std::optional<ReductionOf> ParseReductionTensorName(const std::string& name) {
  if (!absl::StartsWith(name, kReductionsPrefix)) return std::nullopt;
  std::string rest = name.substr(sizeof(kReductionsPrefix) - 1);
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 >= rest.size()) return std::nullopt;
  ReductionOf r;
  r.reduction = rest.substr(0, slash);
  r.tensor = rest.substr(slash + 1);
  r.abs = absl::StartsWith(r.reduction, "abs_");
  if (r.abs) r.reduction = r.reduction.substr(4);
  return r;
}

std::optional<tfevent::DataType> ToDataType(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT16:
      return tfevent::DT_HALF;
    case v1::FLOAT32:
      return tfevent::DT_FLOAT;
    case v1::FLOAT64:
      return tfevent::DT_DOUBLE;
    case v1::INT8:
      return tfevent::DT_INT8;
    case v1::INT16:
      return tfevent::DT_INT16;
    case v1::INT32:
      return tfevent::DT_INT32;
    case v1::INT64:
      return tfevent::DT_INT64;
    case v1::UINT8:
      return tfevent::DT_UINT8;
    case v1::BOOL:
      return tfevent::DT_BOOL;
    case v1::BFLOAT16:
      return tfevent::DT_BFLOAT16;
    default:
      return std::nullopt;
  }
}

std::optional<v1::DType> FromDataType(tfevent::DataType dtype) {
  switch (dtype) {
    case tfevent::DT_HALF:
      return v1::FLOAT16;
    case tfevent::DT_FLOAT:
      return v1::FLOAT32;
    case tfevent::DT_DOUBLE:
      return v1::FLOAT64;
    case tfevent::DT_INT8:
      return v1::INT8;
    case tfevent::DT_INT16:
      return v1::INT16;
    case tfevent::DT_INT32:
      return v1::INT32;
    case tfevent::DT_INT64:
      return v1::INT64;
    case tfevent::DT_UINT8:
      return v1::UINT8;
    case tfevent::DT_BOOL:
      return v1::BOOL;
    case tfevent::DT_BFLOAT16:
      return v1::BFLOAT16;
    default:
      return std::nullopt;
  }
}

}  // namespace smdebug
}  // namespace cli
}  // namespace tensorkeep
