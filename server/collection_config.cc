#include "server/collection_config.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/python_regex.h"
#include "base/status_macros.h"
#include "server/trial.h"
#include "server/validation.h"

namespace tensorkeep {
namespace {

absl::Status Bad(const std::string& collection, const std::string& what) {
  return MakeError(Reason::kBadRequest,
                   absl::StrCat("collection ", QuoteInput(collection), ": ", what));
}

absl::Status CheckRegex(const std::string& collection, const std::string& regex) {
  if (regex.size() > kMaxRegexBytes) {
    return Bad(collection, absl::StrCat("include_regex ", QuoteInput(regex, 40), " is ",
                                        regex.size(), " bytes long; the limit is ",
                                        kMaxRegexBytes));
  }
  const PythonRegexCheck check = CheckPythonRegex(regex);
  if (check.kind != PythonRegexKind::kInvalid) return absl::OkStatus();  // lookaround: stored
  return Bad(collection, absl::StrCat("include_regex ", QuoteInput(regex), " is invalid: ",
                                      QuoteInput(check.error, 200),
                                      " (Python's re syntax, as RE2 reads it)"));
}

bool Known(const std::string& name, std::initializer_list<const char*> allowed) {
  return std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return name == a; });
}

absl::Status CheckReductions(const std::string& collection, const char* field,
                             const google::protobuf::RepeatedPtrField<std::string>& names,
                             bool norms) {
  for (const std::string& n : names) {
    const bool ok = norms ? Known(n, {"l1", "l2"})
                          : Known(n, {"min", "max", "mean", "std", "variance", "sum", "prod"});
    if (!ok) {
      return Bad(collection,
                 absl::StrCat("reduction_config.", field, " has ", QuoteInput(n), "; use ",
                              norms ? "l1 or l2" : "min, max, mean, std, variance, sum or prod"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCollection(const v1::CollectionConfig& c) {
  TK_RETURN_IF_ERROR(ValidateCollectionName(c.name()));
  if (static_cast<size_t>(c.include_regex_size()) > kMaxRegexes) {
    return Bad(c.name(), absl::StrCat("has ", c.include_regex_size(),
                                      " include_regex; the limit is ", kMaxRegexes));
  }
  for (const std::string& r : c.include_regex()) TK_RETURN_IF_ERROR(CheckRegex(c.name(), r));
  for (const std::string& t : c.tensor_names()) TK_RETURN_IF_ERROR(ValidateTensorName(t));
  std::set<int> modes;
  for (const v1::SaveConfigMode& s : c.save_configs()) {
    if (s.mode() < v1::TRAIN || s.mode() > v1::GLOBAL) {
      return Bad(c.name(), absl::StrCat("a save config has mode ", static_cast<int>(s.mode()),
                                        "; use TRAIN, EVAL, PREDICT or GLOBAL"));
    }
    if (!modes.insert(s.mode()).second) {
      return Bad(c.name(), absl::StrCat("two save configs for mode ", ModeName(s.mode())));
    }
    if (s.save_interval() < 1) {
      return Bad(c.name(), absl::StrCat("the save config of mode ", ModeName(s.mode()),
                                        " has save_interval 0; it must be at least 1"));
    }
    TK_RETURN_IF_ERROR(ValidateStep(s.save_interval(), "save_interval"));
    TK_RETURN_IF_ERROR(ValidateStep(s.start_step(), "start_step"));
    TK_RETURN_IF_ERROR(ValidateStep(s.end_step(), "end_step"));
    for (uint64_t step : s.save_steps()) TK_RETURN_IF_ERROR(ValidateStep(step, "a save_steps step"));
  }
  const v1::ReductionConfig& rc = c.reduction_config();
  TK_RETURN_IF_ERROR(CheckReductions(c.name(), "reductions", rc.reductions(), false));
  TK_RETURN_IF_ERROR(CheckReductions(c.name(), "abs_reductions", rc.abs_reductions(), false));
  TK_RETURN_IF_ERROR(CheckReductions(c.name(), "norms", rc.norms(), true));
  TK_RETURN_IF_ERROR(CheckReductions(c.name(), "abs_norms", rc.abs_norms(), true));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePutCollections(const v1::PutCollectionsRequest& request) {
  TK_RETURN_IF_ERROR(ValidateTrialName(request.trial()));
  TK_RETURN_IF_ERROR(ValidateWorkerName(request.worker()));
  if (static_cast<size_t>(request.collections_size()) > kMaxCollections) {
    return MakeError(Reason::kBadRequest,
                     absl::StrCat(request.collections_size(), " collections; one writer may send ",
                                  kMaxCollections, " (MAX_COLLECTIONS, proto/limits.proto)"));
  }
  const size_t bytes = request.ByteSizeLong();
  if (bytes > kMaxCollectionConfigBytes) {
    return MakeError(Reason::kBadRequest,
                     absl::StrCat("the collections are ", bytes, " bytes; the limit is ",
                                  kMaxCollectionConfigBytes,
                                  " (MAX_COLLECTION_CONFIG_BYTES, proto/limits.proto)"));
  }
  std::set<std::string> names;
  for (const v1::CollectionConfig& c : request.collections()) {
    TK_RETURN_IF_ERROR(CheckCollection(c));
    if (!names.insert(c.name()).second) {
      return Bad(c.name(), "sent twice; send each collection once");
    }
  }
  return absl::OkStatus();
}

bool CollectorMatches(const std::string& regex) {
  return CheckPythonRegex(regex).kind == PythonRegexKind::kRe2;
}

storage::WorkerCollections ToStored(const v1::PutCollectionsRequest& request) {
  storage::WorkerCollections out;
  for (const v1::CollectionConfig& c : request.collections()) {
    out.add_collections()->ParseFromString(c.SerializeAsString());
  }
  return out;
}

v1::CollectionConfig ToWire(const storage::StoredCollection& stored) {
  v1::CollectionConfig out;
  out.ParseFromString(stored.SerializeAsString());
  return out;
}

size_t ConfigBytes(const CollectionConfigs& configs) {
  size_t n = 0;
  for (const auto& [worker, c] : configs) n += c->ByteSizeLong();
  return n;
}

size_t CollectionCount(const CollectionConfigs& configs) {
  std::set<std::string_view> names;
  for (const auto& [worker, c] : configs) {
    for (const auto& s : c->collections()) names.insert(s.name());
  }
  return names.size();
}

std::map<std::string, MergedCollection> MergeCollections(const CollectionConfigs& configs) {
  std::map<std::string, MergedCollection> out;
  std::map<std::string, std::set<std::string>> names;
  for (const auto& [worker, c] : configs) {  // workers in lexical order
    for (const storage::StoredCollection& s : c->collections()) {
      auto [it, fresh] = out.try_emplace(s.name());
      if (fresh) it->second.config = ToWire(s);
      it->second.workers.push_back(worker);
      names[s.name()].insert(s.tensor_names().begin(), s.tensor_names().end());
    }
  }
  for (auto& [name, m] : out) {
    m.config.clear_tensor_names();
    for (const std::string& t : names[name]) m.config.add_tensor_names(t);
  }
  return out;
}

std::vector<std::unique_ptr<RE2>> CompileCollectionRegexes(const v1::CollectionConfig& config) {
  std::vector<std::unique_ptr<RE2>> out;
  for (const std::string& r : config.include_regex()) {
    if (auto re = CompilePythonRegex(r)) out.push_back(std::move(re));
  }
  return out;
}

}  // namespace tensorkeep
