// Cluster: the collectors a client spreads trials over (docs/scaling-out.md).
//
// Every trial lives whole on one collector. Its owner is the first collector
// of its rendezvous ranking (base/rendezvous.h); a trial stays on the
// collector that holds it, so after a collector joins an existing trial's
// holder may be further down its ranking: Locate() walks the ranking, asking
// each collector (GetTrial) until one holds the trial. A new trial goes to
// its owner. With one collector nothing is asked.
//
// Thread safety: thread-safe (immutable after Open).
#ifndef TENSORKEEP_CLIENT_CLUSTER_H_
#define TENSORKEEP_CLIENT_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {

// The environment variable listing a cluster's collectors, HOST:PORT,...
inline constexpr char kServersEnv[] = "TENSORKEEP_SERVERS";

// The collectors a client uses: the given values (each may be a comma list,
// e.g. several --server flags) if any; else $TENSORKEEP_SERVERS; else
// $TENSORKEEP_SERVER; else kDefaultServer. InvalidArgument for a malformed
// list (base/collector_list.h).
absl::StatusOr<std::vector<std::string>> ResolveServers(const std::vector<std::string>& given);

class Cluster {
 public:
  // Connections to every collector (connected lazily).
  static absl::StatusOr<std::shared_ptr<Cluster>> Open(const std::vector<std::string>& addresses,
                                                       const ClientSecurity& security = {});
  // `servers`: a comma list, or "" for the environment (ResolveServers).
  static absl::StatusOr<std::shared_ptr<Cluster>> Open(const std::string& servers,
                                                       const ClientSecurity& security = {});

  size_t size() const { return connections_.size(); }
  // In the order given.
  const std::vector<std::shared_ptr<Connection>>& connections() const { return connections_; }
  // The connections in `trial`'s rendezvous ranking, its owner first.
  std::vector<std::shared_ptr<Connection>> Ranking(const std::string& trial) const;

  // What the caller means to do with the trial, for when it is found nowhere.
  enum class Purpose {
    // Read it: a collector that cannot be reached may hold it, so that is an
    // UNAVAILABLE error naming it; found nowhere else, the owner (a trial
    // not yet written: live analysis waits there).
    kRead,
    // Write it: found nowhere, the owner (collectors that cannot be reached
    // are passed over; see docs/scaling-out.md for what that risks).
    kWrite,
  };
  // The collector that holds `trial` (walking its ranking), else as `purpose`
  // says. Errors other than TrialNotFound and unreachable collectors (a
  // token refused, TLS disagreement) are returned as they are.
  absl::StatusOr<std::shared_ptr<Connection>> Locate(const std::string& trial,
                                                     Purpose purpose = Purpose::kRead) const;

  // Every collector's trials, asked in parallel. `failures` names each
  // collector that did not answer and why; the others' trials are listed.
  struct Listing {
    // (collector address, summary), sorted by trial name.
    std::vector<std::pair<std::string, v1::TrialSummary>> trials;
    std::vector<std::pair<std::string, absl::Status>> failures;
  };
  Listing ListTrials(double timeout_seconds = 10) const;

 private:
  explicit Cluster(std::vector<std::shared_ptr<Connection>> connections)
      : connections_(std::move(connections)) {}
  std::vector<std::shared_ptr<Connection>> connections_;
};

// The collector of `trial` among `servers` (a comma list, or "" for the
// environment): Cluster::Open + Locate, without a call when there is one.
absl::StatusOr<std::shared_ptr<Connection>> ConnectForTrial(
    const std::string& servers, const std::string& trial, const ClientSecurity& security = {},
    Cluster::Purpose purpose = Cluster::Purpose::kRead);

}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLUSTER_H_
