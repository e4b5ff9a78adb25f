// Rendezvous (highest-random-weight) hashing: which collector of a cluster
// owns a trial. Every trial lives whole on one collector; clients route a
// trial to the first collector of its ranking, and collectors started with
// --cluster refuse to create trials they do not own.
//
// The definition is shared with the Python client (tensorkeep/_rendezvous.py)
// and pinned by tests/data/rendezvous_vectors.txt:
//   score(collector, trial) = the first 8 bytes, big-endian, of
//                             SHA-256(collector + "\n" + trial)
//   ranking(trial)          = collectors by score, highest first; equal
//                             scores by address, ascending.
// Collectors are named by the HOST:PORT clients use (the --advertise address):
// every client and collector must list the same spellings.
//
// Adding a collector moves only the trials it now owns (about 1/N of them),
// and removing one leaves every other trial's order unchanged.
#ifndef TENSORKEEP_BASE_RENDEZVOUS_H_
#define TENSORKEEP_BASE_RENDEZVOUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tensorkeep {

uint64_t RendezvousScore(std::string_view collector, std::string_view trial);

// `collectors` ordered for `trial`, its owner first.
std::vector<std::string> RendezvousRanking(const std::vector<std::string>& collectors,
                                           std::string_view trial);

// The first of RendezvousRanking ("" when `collectors` is empty).
std::string RendezvousOwner(const std::vector<std::string>& collectors, std::string_view trial);

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_RENDEZVOUS_H_
