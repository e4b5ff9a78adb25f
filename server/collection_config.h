// The collection configuration writers send (PutCollections, docs/python.md
// "Collections"): its checks, its stored form, and a trial's merged view of
// every worker's.
//
// Regexes are checked with RE2. Lookaround ((?=, (?!, (?<=, (?<!) and
// backreferences (\1, (?P=name)), which smdebug's built-in collections use
// (weights: "^(?!gradient).*weight"), are Python's and not RE2's: such a
// regex is accepted when the rest of it is valid, stored as sent, and matched
// only by the Python client (the collector's own matching skips it).
#ifndef TENSORKEEP_SERVER_COLLECTION_CONFIG_H_
#define TENSORKEEP_SERVER_COLLECTION_CONFIG_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tensorkeep.pb.h"
#include "re2/re2.h"
#include "server/validation.h"
#include "storage/stored.pb.h"

namespace tensorkeep {

// The collections of one worker, as stored.
using WorkerCollectionsPtr = std::shared_ptr<const storage::WorkerCollections>;
// Worker -> what it sent.
using CollectionConfigs = std::map<std::string, WorkerCollectionsPtr>;

// BAD_REQUEST naming the first problem of `request`: trial or worker name,
// more than kMaxCollections collections or a name twice, a collection name,
// more than MAX_REGEXES regexes or one longer than MAX_REGEX_BYTES or that
// RE2 refuses (beyond Python's lookaround and backreferences), a tensor
// name, a save config (mode, interval, steps), an unknown reduction, or
// more than kMaxCollectionConfigBytes in all.
absl::Status ValidatePutCollections(const v1::PutCollectionsRequest& request);

// Whether RE2 runs `regex` as Python's re would (false: it uses lookaround
// or backreferences; only the Python client matches it).
bool CollectorMatches(const std::string& regex);

// The stored form of a request's collections, and a stored collection on
// the wire (both by serialization: their field numbers agree).
storage::WorkerCollections ToStored(const v1::PutCollectionsRequest& request);
v1::CollectionConfig ToWire(const storage::StoredCollection& stored);

// The serialized bytes all workers' configurations take together.
size_t ConfigBytes(const CollectionConfigs& configs);
// The distinct collection names of `configs`.
size_t CollectionCount(const CollectionConfigs& configs);

// One collection of the trial's merged view: the configuration of the
// lexically first worker that sent it (smdebug reads the first worker's
// collection file), with the tensor names every worker configured, and the
// workers that sent it.
struct MergedCollection {
  v1::CollectionConfig config;
  std::vector<std::string> workers;
};
std::map<std::string, MergedCollection> MergeCollections(const CollectionConfigs& configs);

// The regexes of `config` RE2 can run, compiled (those it cannot are
// skipped; they were checked when stored).
std::vector<std::unique_ptr<RE2>> CompileCollectionRegexes(const v1::CollectionConfig& config);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_COLLECTION_CONFIG_H_
