// smdebug's collection files (collections/000000000/<worker>_collections.json,
// smdebug_layout.h) and the collections' configuration tensorkeep stores
// (CollectionConfig, PutCollections), both ways:
//
//   {"collections": {name: {"name", "include_regex": [..], "tensor_names": [..],
//     "reduction_config": null | {"save_raw_tensor", "reductions": "min,abs_l2_norm,..",
//                                 "save_shape"},
//     "save_config": null | {"TRAIN"|"EVAL"|"PREDICT"|"GLOBAL": null |
//         {"save_interval", "save_steps", "start_step", "end_step"}},
//     "save_histogram"}},
//    "_meta": {"num_workers": N}}
//
// Read as smdebug 1.0's Collection.from_dict reads it (its defaults: a
// missing save_interval is 500, start_step 0, end_step None, save_steps [];
// save_histogram true; an absent or null config is none), written as its
// Collection.to_json_dict writes it.
#ifndef TENSORKEEP_CLIENT_CLI_SMDEBUG_COLLECTIONS_H_
#define TENSORKEEP_CLIENT_CLI_SMDEBUG_COLLECTIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"
#include "proto/tensorkeep.pb.h"
#include "re2/re2.h"

namespace tensorkeep {
namespace cli {
namespace smdebug {

// One collection of a collections file.
struct FileCollection {
  // What PutCollections stores: its regexes (Python-only ones included, as
  // written; those RE2 refuses even without lookaround left out and named in
  // `problems`), names, save and reduction configs.
  v1::CollectionConfig config;
  // Non-empty: its save or reduction config could not be read as smdebug
  // would (each says why); `configured` is then false and only its regexes
  // and names are used, to tag tensors.
  std::vector<std::string> problems;
  bool configured = true;
  // Its regexes RE2 runs (re.search semantics: RE2::PartialMatch).
  std::vector<std::unique_ptr<RE2>> matchers;
  size_t python_only_regexes = 0;  // lookaround or backreferences: not in matchers

  // Whether `tensor` belongs to it (its names, or a regex RE2 runs).
  bool Contains(const std::string& tensor) const;
};

struct CollectionsFile {
  uint32_t num_workers = 0;
  std::vector<FileCollection> collections;
};

// A collections file's text (`path` names it in errors). INVALID_ARGUMENT
// when it is not JSON or not an object of collections; a collection whose
// configuration is wrong is kept with its `problems`.
absl::StatusOr<CollectionsFile> ParseCollectionsFile(const std::string& text,
                                                     const std::string& path);

// The worker of a collections file's name ("worker_0_collections.json" ->
// "worker_0"), or empty when it is not one.
std::string WorkerOfCollectionsFile(const std::string& file_name);

// The tensor names a collection file lists for `info`: its configured names,
// and the saved tensors in it that none of its regexes matches (smdebug
// matches them again on reading); every saved one when it is not configured.
std::vector<std::string> ListedTensorNames(const v1::CollectionInfo& info);

// One collection as smdebug writes it: `config`'s regexes, save config and
// reduction config when `configured` (else smdebug's "nothing configured":
// no regexes, null configs, save_histogram true), with `tensor_names`.
google::protobuf::Value CollectionJson(const std::string& name, bool configured,
                                       const v1::CollectionConfig& config,
                                       const std::vector<std::string>& tensor_names);

}  // namespace smdebug
}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_SMDEBUG_COLLECTIONS_H_
