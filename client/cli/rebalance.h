// rebalance: moves finished trials to the collector that owns them
// (docs/scaling-out.md, "Adding a collector").
//
// After a collector joins, a trial stays on the collector that holds it,
// further down its rendezvous ranking; clients find it by walking the
// ranking. `tensorkeep rebalance` lists every collector's trials and, for
// each ended trial held by a collector that is not its owner:
//   1. copies it whole to its owner as an unpublished trial (Open.unpublished:
//      hidden from every reader): each worker's records at every step (value,
//      dtype, shape, mode and mode step, saved reductions, collections), each
//      worker's committed step and end state (CLOSED, LOST), the rule
//      statuses (and the stop request they imply), and the end;
//   2. verifies the copy: reads both back and compares their fingerprints
//      (trial_fingerprint.h: counts, states and a SHA-256 over every value);
//   3. publishes the copy (PublishTrial), then deletes the trial from its old
//      holder (DeleteTrial).
// Safe to interrupt anywhere: until the publish the copy is invisible and
// the original untouched (a later run deletes the unpublished copy and
// copies again); between publish and delete both collectors hold equal
// trials and clients read the owner's (first in the ranking), and a later
// run verifies again and deletes the old one. Live trials are not moved
// (listed as skipped). Needs an admin token (PublishTrial, DeleteTrial).
#ifndef TENSORKEEP_CLIENT_CLI_REBALANCE_H_
#define TENSORKEEP_CLIENT_CLI_REBALANCE_H_

#include "client/cli/args.h"
#include "client/cluster.h"
#include "client/credentials.h"

namespace tensorkeep {
namespace cli {

// `tensorkeep rebalance [--dry-run]`. Exit status: 0 when every trial that
// should move moved (or, with --dry-run, was listed), 1 when a move failed,
// 3 when a collector could not be listed (its trials were not considered).
int Rebalance(const Args& args, const Cluster& cluster, const ClientSecurity& security);

}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_REBALANCE_H_
