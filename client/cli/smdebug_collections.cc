#include "client/cli/smdebug_collections.h"

#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/python_regex.h"
#include "google/protobuf/util/json_util.h"

namespace tensorkeep {
namespace cli {
namespace smdebug {
namespace {

using google::protobuf::Value;

constexpr char kSuffix[] = "_collections.json";

// smdebug's SaveConfigMode defaults (smdebug/core/save_config.py).
constexpr int64_t kDefaultSaveInterval = 500;

struct ModeName {
  v1::Mode mode;
  const char* name;
};
constexpr ModeName kModes[] = {
    {v1::TRAIN, "TRAIN"}, {v1::EVAL, "EVAL"}, {v1::PREDICT, "PREDICT"}, {v1::GLOBAL, "GLOBAL"}};

bool Known(const std::string& name, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed) {
    if (name == a) return true;
  }
  return false;
}

// An integer as smdebug's int(x) takes it: a whole JSON number or a
// numeric string.
bool AsInt(const Value& v, int64_t* out) {
  if (v.kind_case() == Value::kNumberValue) {
    const double d = v.number_value();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  if (v.kind_case() == Value::kStringValue) {
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(v.string_value()), out);
  }
  return false;
}

std::string Shown(const Value& v) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out.size() > 40 ? out.substr(0, 40) + "..." : out;
}

// smdebug's SaveConfigMode.from_dict of one mode.
absl::Status ReadSaveConfigMode(v1::Mode mode, const char* mode_name, const Value& v,
                                v1::SaveConfigMode* out) {
  if (v.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat("save_config.", mode_name, " is ", Shown(v), ", not an object or null"));
  }
  const auto& f = v.struct_value().fields();
  auto field = [&](const char* key) -> const Value* {
    auto it = f.find(key);
    return it == f.end() || it->second.kind_case() == Value::kNullValue ? nullptr : &it->second;
  };
  out->set_mode(mode);
  auto step = [&](const char* key, int64_t fallback, int64_t min, uint64_t* to) -> absl::Status {
    int64_t x = fallback;
    if (const Value* v = field(key); v != nullptr && !AsInt(*v, &x)) {
      return absl::InvalidArgumentError(
          absl::StrCat("save_config.", mode_name, ".", key, " is ", Shown(*v), ", not an integer"));
    }
    if (x < min) {
      return absl::InvalidArgumentError(absl::StrCat("save_config.", mode_name, ".", key, " is ", x,
                                                     "; tensorkeep stores ", min, " or more"));
    }
    *to = static_cast<uint64_t>(x);
    return absl::OkStatus();
  };
  uint64_t interval = 0, start = 0;
  if (absl::Status s = step("save_interval", kDefaultSaveInterval, 1, &interval); !s.ok()) return s;
  if (absl::Status s = step("start_step", 0, 0, &start); !s.ok()) return s;
  out->set_save_interval(interval);
  out->set_start_step(start);
  if (field("end_step") != nullptr) {
    uint64_t end = 0;
    if (absl::Status s = step("end_step", 0, 0, &end); !s.ok()) return s;
    out->set_has_end_step(true);
    out->set_end_step(end);
  }
  if (const Value* steps = field("save_steps"); steps != nullptr) {
    if (steps->kind_case() != Value::kListValue) {
      return absl::InvalidArgumentError(absl::StrCat("save_config.", mode_name, ".save_steps is ",
                                                     Shown(*steps), ", not a list"));
    }
    for (const Value& s : steps->list_value().values()) {
      int64_t x = 0;
      if (s.kind_case() != Value::kNumberValue || !AsInt(s, &x) || x < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "save_config.", mode_name, ".save_steps holds ", Shown(s), ", not a step (>= 0)"));
      }
      out->add_save_steps(static_cast<uint64_t>(x));
    }
  }
  return absl::OkStatus();
}

// smdebug's SaveConfig.from_dict: null, or one entry (or null) per mode.
absl::Status ReadSaveConfig(const Value& v, v1::CollectionConfig* out) {
  if (v.kind_case() == Value::kNullValue) return absl::OkStatus();
  if (v.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat("save_config is ", Shown(v), ", not an object or null"));
  }
  const auto& f = v.struct_value().fields();
  for (const auto& [key, unused] : f) {
    if (!Known(key, {"TRAIN", "EVAL", "PREDICT", "GLOBAL"})) {
      return absl::InvalidArgumentError(absl::StrCat(
          "save_config has mode \"", key, "\"; smdebug's modes are TRAIN, EVAL, PREDICT, GLOBAL"));
    }
  }
  for (const ModeName& m : kModes) {
    auto it = f.find(m.name);
    if (it == f.end() || it->second.kind_case() == Value::kNullValue) continue;
    v1::SaveConfigMode mode;
    if (absl::Status s = ReadSaveConfigMode(m.mode, m.name, it->second, &mode); !s.ok()) return s;
    *out->add_save_configs() = std::move(mode);
  }
  return absl::OkStatus();
}

// smdebug's ReductionConfig.from_dict: "reductions" is one comma-separated
// string ("min,abs_mean,l2_norm,abs_l1_norm").
absl::Status ReadReductionConfig(const Value& v, v1::CollectionConfig* out) {
  if (v.kind_case() == Value::kNullValue) return absl::OkStatus();
  if (v.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduction_config is ", Shown(v), ", not an object or null"));
  }
  const auto& f = v.struct_value().fields();
  v1::ReductionConfig rc;
  auto flag = [&](const char* key, bool* to) -> absl::Status {
    auto it = f.find(key);
    if (it == f.end()) return absl::OkStatus();
    if (it->second.kind_case() != Value::kBoolValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduction_config.", key, " is ", Shown(it->second), ", not true or false"));
    }
    *to = it->second.bool_value();
    return absl::OkStatus();
  };
  bool raw = false, shape = false;
  if (absl::Status s = flag("save_raw_tensor", &raw); !s.ok()) return s;
  if (absl::Status s = flag("save_shape", &shape); !s.ok()) return s;
  rc.set_save_raw_tensor(raw);
  rc.set_save_shape(shape);
  if (auto it = f.find("reductions");
      it != f.end() && it->second.kind_case() != Value::kNullValue) {
    if (it->second.kind_case() != Value::kStringValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduction_config.reductions is ", Shown(it->second), ", not a string"));
    }
    for (absl::string_view part : absl::StrSplit(it->second.string_value(), ',')) {
      std::string red(absl::StripAsciiWhitespace(part));
      if (red.empty()) continue;
      const bool abs = absl::StartsWith(red, "abs_");
      std::string base = abs ? red.substr(4) : red;
      const bool norm = absl::EndsWith(base, "_norm");
      if (norm) base.resize(base.size() - 5);
      const bool ok = norm ? Known(base, {"l1", "l2"})
                           : Known(base, {"min", "max", "mean", "std", "variance", "sum", "prod"});
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reduction_config.reductions has \"", red,
            "\"; smdebug's are min, max, mean, std, variance, sum, prod, l1_norm, l2_norm and "
            "their abs_ forms"));
      }
      (norm ? (abs ? rc.add_abs_norms() : rc.add_norms())
            : (abs ? rc.add_abs_reductions() : rc.add_reductions()))
          ->assign(base);
    }
  }
  *out->mutable_reduction_config() = std::move(rc);
  return absl::OkStatus();
}

// The strings of a list field (absent or null: none).
absl::StatusOr<std::vector<std::string>> Strings(const google::protobuf::Struct& c,
                                                 const char* key) {
  std::vector<std::string> out;
  auto it = c.fields().find(key);
  if (it == c.fields().end() || it->second.kind_case() == Value::kNullValue) return out;
  // smdebug's Collection.from_dict defaults include_regex to False.
  if (it->second.kind_case() == Value::kBoolValue && !it->second.bool_value()) return out;
  if (it->second.kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " is ", Shown(it->second), ", not a list of strings"));
  }
  for (const Value& v : it->second.list_value().values()) {
    if (v.kind_case() != Value::kStringValue) {
      return absl::InvalidArgumentError(absl::StrCat(key, " holds ", Shown(v), ", not a string"));
    }
    out.push_back(v.string_value());
  }
  return out;
}

}  // namespace

bool FileCollection::Contains(const std::string& tensor) const {
  for (const std::string& n : config.tensor_names()) {
    if (n == tensor) return true;
  }
  for (const auto& re : matchers) {
    if (RE2::PartialMatch(tensor, *re)) return true;
  }
  return false;
}

absl::StatusOr<CollectionsFile> ParseCollectionsFile(const std::string& text,
                                                     const std::string& path) {
  google::protobuf::Struct json;
  if (auto s = google::protobuf::util::JsonStringToMessage(text, &json); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON: ", s.ToString()));
  }
  CollectionsFile out;
  const auto& f = json.fields();
  if (auto meta = f.find("_meta"); meta != f.end() && meta->second.has_struct_value()) {
    const auto& m = meta->second.struct_value().fields();
    if (auto n = m.find("num_workers"); n != m.end()) {
      int64_t workers = 0;
      if (AsInt(n->second, &workers) && workers > 0 && workers < (1 << 30)) {
        out.num_workers = static_cast<uint32_t>(workers);
      }
    }
  }
  auto colls = f.find("collections");
  if (colls == f.end()) return out;
  if (!colls->second.has_struct_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": \"collections\" is not an object"));
  }
  for (const auto& [name, c] : colls->second.struct_value().fields()) {
    if (!c.has_struct_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": collection ", name, " is ", Shown(c), ", not an object"));
    }
    const auto& cs = c.struct_value();
    FileCollection fc;
    fc.config.set_name(name);
    auto names = Strings(cs, "tensor_names");
    if (!names.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": collection ", name, ": ", names.status().message()));
    }
    std::set<std::string> sorted(names->begin(), names->end());
    for (const std::string& n : sorted) fc.config.add_tensor_names(n);
    auto regexes = Strings(cs, "include_regex");
    if (!regexes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": collection ", name, ": ", regexes.status().message()));
    }
    for (const std::string& r : *regexes) {
      const PythonRegexCheck check = CheckPythonRegex(r);
      if (check.kind == PythonRegexKind::kInvalid) {
        fc.problems.push_back(absl::StrCat("include_regex \"", r, "\" is not understood (",
                                           check.error, "): left out"));
        continue;
      }
      fc.config.add_include_regex(r);
      if (check.kind == PythonRegexKind::kPythonOnly) {
        ++fc.python_only_regexes;
      } else if (auto re = CompilePythonRegex(r)) {
        fc.matchers.push_back(std::move(re));
      }
    }
    absl::Status s = absl::OkStatus();
    if (auto it = cs.fields().find("save_config"); it != cs.fields().end()) {
      s = ReadSaveConfig(it->second, &fc.config);
    }
    if (auto it = cs.fields().find("reduction_config"); s.ok() && it != cs.fields().end()) {
      s = ReadReductionConfig(it->second, &fc.config);
    }
    bool histogram = true;
    if (auto it = cs.fields().find("save_histogram"); s.ok() && it != cs.fields().end()) {
      if (it->second.kind_case() == Value::kBoolValue) {
        histogram = it->second.bool_value();
      } else if (it->second.kind_case() != Value::kNullValue) {
        s = absl::InvalidArgumentError(
            absl::StrCat("save_histogram is ", Shown(it->second), ", not true or false"));
      }
    }
    fc.config.set_save_histogram(histogram);
    if (!s.ok()) {
      fc.problems.push_back(absl::StrCat(s.message(), ": its configuration is not stored"));
      fc.configured = false;
    }
    out.collections.push_back(std::move(fc));
  }
  return out;
}

std::string WorkerOfCollectionsFile(const std::string& file_name) {
  if (!absl::EndsWith(file_name, kSuffix) || file_name.size() <= sizeof(kSuffix) - 1) return "";
  return file_name.substr(0, file_name.size() - (sizeof(kSuffix) - 1));
}

std::vector<std::string> ListedTensorNames(const v1::CollectionInfo& info) {
  if (!info.configured()) return {info.tensor_names().begin(), info.tensor_names().end()};
  std::set<std::string> out(info.config().tensor_names().begin(),
                            info.config().tensor_names().end());
  std::vector<std::unique_ptr<RE2>> matchers;
  for (const std::string& r : info.config().include_regex()) {
    if (auto re = CompilePythonRegex(r)) matchers.push_back(std::move(re));
  }
  for (const std::string& t : info.tensor_names()) {
    bool matched = false;
    for (const auto& re : matchers) matched = matched || RE2::PartialMatch(t, *re);
    if (!matched) out.insert(t);
  }
  return {out.begin(), out.end()};
}

google::protobuf::Value CollectionJson(const std::string& name, bool configured,
                                       const v1::CollectionConfig& config,
                                       const std::vector<std::string>& tensor_names) {
  Value out;
  auto* c = out.mutable_struct_value()->mutable_fields();
  (*c)["name"].set_string_value(name);
  auto* regex = (*c)["include_regex"].mutable_list_value();
  auto* tn = (*c)["tensor_names"].mutable_list_value();
  std::set<std::string> names(tensor_names.begin(), tensor_names.end());
  for (const std::string& t : names) tn->add_values()->set_string_value(t);
  (*c)["reduction_config"].set_null_value(google::protobuf::NULL_VALUE);
  (*c)["save_config"].set_null_value(google::protobuf::NULL_VALUE);
  (*c)["save_histogram"].set_bool_value(configured ? config.save_histogram() : true);
  if (!configured) return out;
  for (const std::string& r : config.include_regex()) regex->add_values()->set_string_value(r);
  if (config.has_reduction_config()) {
    const v1::ReductionConfig& rc = config.reduction_config();
    // smdebug's ReductionConfig.to_json_dict order: reductions, norms,
    // abs_reductions, abs_norms.
    std::vector<std::string> all;
    for (const auto& r : rc.reductions()) all.push_back(r);
    for (const auto& r : rc.norms()) all.push_back(absl::StrCat(r, "_norm"));
    for (const auto& r : rc.abs_reductions()) all.push_back(absl::StrCat("abs_", r));
    for (const auto& r : rc.abs_norms()) all.push_back(absl::StrCat("abs_", r, "_norm"));
    auto* r = (*c)["reduction_config"].mutable_struct_value()->mutable_fields();
    (*r)["save_raw_tensor"].set_bool_value(rc.save_raw_tensor());
    (*r)["reductions"].set_string_value(absl::StrJoin(all, ","));
    (*r)["save_shape"].set_bool_value(rc.save_shape());
  }
  if (config.save_configs_size() > 0) {
    auto* sc = (*c)["save_config"].mutable_struct_value()->mutable_fields();
    for (const ModeName& m : kModes) (*sc)[m.name].set_null_value(google::protobuf::NULL_VALUE);
    for (const v1::SaveConfigMode& s : config.save_configs()) {
      const char* mode_name = nullptr;
      for (const ModeName& m : kModes) {
        if (m.mode == s.mode()) mode_name = m.name;
      }
      if (mode_name == nullptr) continue;
      auto* mf = (*sc)[mode_name].mutable_struct_value()->mutable_fields();
      (*mf)["save_interval"].set_number_value(static_cast<double>(s.save_interval()));
      auto* steps = (*mf)["save_steps"].mutable_list_value();
      for (uint64_t x : s.save_steps())
        steps->add_values()->set_number_value(static_cast<double>(x));
      (*mf)["start_step"].set_number_value(static_cast<double>(s.start_step()));
      if (s.has_end_step()) {
        (*mf)["end_step"].set_number_value(static_cast<double>(s.end_step()));
      } else {
        (*mf)["end_step"].set_null_value(google::protobuf::NULL_VALUE);
      }
    }
  }
  return out;
}

}  // namespace smdebug
}  // namespace cli
}  // namespace tensorkeep
