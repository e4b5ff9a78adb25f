#include "client/cli/rebalance.h"

#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/rendezvous.h"
#include "base/status_macros.h"
#include "client/cli/cli_errors.h"
#include "client/cli/trial_walk.h"
#include "client/trial.h"
#include "client/writer.h"

namespace tensorkeep {
namespace cli {
namespace {

// Exit status when a collector could not be listed (as `trials`).
constexpr int kUnlisted = 3;

// Tests: TENSORKEEP_REBALANCE_CRASH_AT=copied (the copy is written, not
// published) or =published (published, the old holder not yet deleted) ends
// the process there at once, as a kill would.
void MaybeCrash(const char* stage) {
  const char* at = std::getenv("TENSORKEEP_REBALANCE_CRASH_AT");
  if (at != nullptr && std::string(at) == stage) {
    std::cout << "(TENSORKEEP_REBALANCE_CRASH_AT=" << stage << ": stopping here)" << std::endl;
    std::_Exit(70);
  }
}

// One trial to move: held by `holder`, owned by `owner`.
struct Move {
  std::string trial;
  std::shared_ptr<Connection> holder;
  std::shared_ptr<Connection> owner;
  v1::TrialSummary summary;  // as the holder listed it
  bool owner_has_it = false;  // published on the owner already (an earlier run stopped)
};

// Writes the copy of `source` (walked into `contents`) to `owner` as an
// unpublished trial: records, commits, worker ends, rule statuses, the end.
absl::StatusOr<TrialFingerprint> Copy(const client::Trial& source,
                                      const std::shared_ptr<Connection>& owner,
                                      const ClientSecurity& security, TrialContents* contents) {
  TK_ASSIGN_OR_RETURN(v1::TrialSummary summary, source.Summary());
  if (!summary.ended()) {
    return absl::FailedPreconditionError(
        absl::StrCat("trial '", source.name(), "' is live (not ended): it is not moved"));
  }
  // One writer per worker, opened before any record so that every worker
  // the original knew exists in the copy, even one that saved nothing.
  std::map<std::string, std::unique_ptr<client::Writer>> writers;
  for (const std::string& worker : summary.workers()) {
    client::WriterOptions o;
    o.server = owner->address();
    o.security = security;
    o.trial = source.name();
    o.worker = worker;
    o.num_workers = std::max<uint32_t>(1, summary.num_workers());
    o.unpublished = true;
    o.retry_timeout_seconds = 30;
    TK_ASSIGN_OR_RETURN(writers[worker], client::Writer::Open(o));
  }
  TK_ASSIGN_OR_RETURN(
      TrialFingerprint fp,
      WalkTrial(source, contents,
                [&](const std::string& worker, v1::TensorRecord record) -> absl::Status {
                  auto w = writers.find(worker);
                  if (w == writers.end()) {
                    return absl::DataLossError(absl::StrCat(
                        "trial '", source.name(), "': worker '", worker,
                        "' saved tensors but is not among the trial's workers"));
                  }
                  return w->second->Write(std::move(record));
                }));
  // Each worker's commits and end, as the original's statuses say. CLOSED
  // workers close last: once every worker is CLOSED or LOST the trial ends.
  std::vector<std::string> closed, lost;
  for (const v1::WorkerStatus& s : contents->summary.worker_statuses()) {
    client::Writer* w = writers.at(s.worker()).get();
    if (s.committed_through() >= 0) {
      TK_RETURN_IF_ERROR(w->EndStep(static_cast<uint64_t>(s.committed_through())));
    }
    TK_RETURN_IF_ERROR(w->Flush());
    if (s.state() == v1::CLOSED) {
      closed.push_back(s.worker());
    } else {
      TK_RETURN_IF_ERROR(w->Close(false));
      if (s.state() == v1::LOST) lost.push_back(s.worker());
    }
  }
  client::Trial copy(owner, source.name());
  for (const std::string& worker : lost) {
    TK_RETURN_IF_ERROR(copy.DeclareWorkerLost(worker).status());
  }
  for (const v1::RuleStatus& r : contents->rules) TK_RETURN_IF_ERROR(copy.ReportRuleStatus(r));
  // The collections' configurations (PutCollections), per worker that sent
  // them, before the copy ends (an ended trial's collections cannot change).
  TK_ASSIGN_OR_RETURN(std::vector<v1::CollectionInfo> infos, source.CollectionInfos());
  std::map<std::string, std::vector<v1::CollectionConfig>> configs_of;
  for (const v1::CollectionInfo& info : infos) {
    if (!info.configured()) continue;
    for (const std::string& worker : info.configured_by()) {
      configs_of[worker].push_back(info.config());
    }
  }
  const client::Trial unpublished_copy(owner->SeeingUnpublished(), source.name());
  for (const auto& [worker, configs] : configs_of) {
    TK_RETURN_IF_ERROR(unpublished_copy.PutCollections(worker, configs).status());
  }
  for (const std::string& worker : closed) TK_RETURN_IF_ERROR(writers.at(worker)->Close(true));
  TK_RETURN_IF_ERROR(copy.End().status());
  return fp;
}

// Verifies that the owner's copy reads back as the original. `copy` reads the owner (seeing unpublished trials or not).
absl::Status Verify(const Move& m, const TrialFingerprint& original,
                             const client::Trial& copy) {
  TK_ASSIGN_OR_RETURN(TrialFingerprint copied, WalkTrial(copy, nullptr, nullptr));
  if (copied != original) {
    return absl::DataLossError(absl::StrCat(
        "trial '", m.trial, "': the copy on ", m.owner->address(),
        " does not read back as the original on ", m.holder->address(), " (original: ",
        original.Describe(), "; copy: ", copied.Describe(), "); the original is kept"));
  }
  std::cout << "  verified: " << copied.Describe() << std::endl;
  return absl::OkStatus();
}

absl::Status DeleteOriginal(const Move& m) {
  client::Trial original(m.holder, m.trial);
  auto deleted = original.Delete(/*wait_reclaimed=*/false);
  // Gone already (a run that stopped after deleting): nothing left to do.
  if (!deleted.ok() && GetReason(deleted.status()) != Reason::kTrialNotFound) {
    return deleted.status();
  }
  std::cout << "  deleted from " << m.holder->address() << std::endl;
  return absl::OkStatus();
}

absl::Status MoveTrial(const Move& m, const ClientSecurity& security) {
  client::Trial original(m.holder, m.trial);
  if (m.owner_has_it) {
    // An earlier run published the copy and stopped before deleting.
    std::cout << "  " << m.owner->address()
              << " holds a published copy already: verifying it" << std::endl;
    TK_ASSIGN_OR_RETURN(TrialFingerprint fp, WalkTrial(original, nullptr, nullptr));
    TK_RETURN_IF_ERROR(Verify(m, fp, client::Trial(m.owner, m.trial)));
    return DeleteOriginal(m);
  }
  // Published since the listing (another run): verify that one instead.
  if (client::Trial(m.owner, m.trial).Summary().ok()) {
    Move again = m;
    again.owner_has_it = true;
    return MoveTrial(again, security);
  }
  // An unpublished copy left by an earlier run is redone from the start.
  client::Trial unpublished(m.owner->SeeingUnpublished(), m.trial);
  if (auto left = unpublished.Summary(); left.ok()) {
    std::cout << "  removing the unfinished copy an earlier run left on " << m.owner->address()
              << std::endl;
    auto gone = unpublished.Delete(/*wait_reclaimed=*/false);
    if (!gone.ok() && GetReason(gone.status()) != Reason::kTrialNotFound) return gone.status();
  } else if (GetReason(left.status()) != Reason::kTrialNotFound) {
    return left.status();
  }
  TrialContents contents;
  TK_ASSIGN_OR_RETURN(TrialFingerprint fp, Copy(original, m.owner, security, &contents));
  std::cout << "  copied to " << m.owner->address() << " (unpublished)" << std::endl;
  MaybeCrash("copied");
  TK_RETURN_IF_ERROR(Verify(m, fp, unpublished));
  TK_RETURN_IF_ERROR(unpublished.Publish().status());
  std::cout << "  published on " << m.owner->address() << std::endl;
  MaybeCrash("published");
  return DeleteOriginal(m);
}

}  // namespace

int Rebalance(const Args& args, const Cluster& cluster, const ClientSecurity& security) {
  if (!args.positional().empty()) return UsageError("rebalance takes no arguments");
  const bool dry_run = args.Has("dry-run");
  std::vector<std::string> addresses;
  std::map<std::string, std::shared_ptr<Connection>> by_address;
  for (const auto& c : cluster.connections()) {
    addresses.push_back(c->address());
    by_address[c->address()] = c;
  }
  if (cluster.size() < 2) {
    std::cout << "one collector (" << addresses.front()
              << "): every trial is on its owner, nothing to move. Give the cluster's full list "
                 "(TENSORKEEP_SERVERS or several --server)."
              << std::endl;
    return 0;
  }
  const Cluster::Listing listing = cluster.ListTrials();
  for (const auto& [address, status] : listing.failures) {
    std::cerr << "tensorkeep: the trials of the collector at " << address
              << " could not be listed (they are not moved): " << status.message() << "\n";
  }
  // Each trial's holders.
  std::map<std::string, std::vector<std::pair<std::string, v1::TrialSummary>>> holders;
  for (const auto& [address, summary] : listing.trials) {
    holders[summary.name()].emplace_back(address, summary);
  }
  std::vector<Move> moves;
  std::vector<std::pair<std::string, std::string>> live;  // (trial, holder)
  size_t in_place = 0;
  for (const auto& [name, held] : holders) {
    const std::string owner = RendezvousOwner(addresses, name);
    bool on_owner = false;
    for (const auto& h : held) on_owner |= h.first == owner;
    for (const auto& [address, summary] : held) {
      if (address == owner) {
        ++in_place;
        continue;
      }
      if (!summary.ended()) {
        live.emplace_back(name, address);
        continue;
      }
      moves.push_back(Move{name, by_address.at(address), by_address.at(owner), summary, on_owner});
    }
  }
  std::cout << listing.trials.size() << " trials on " << cluster.size() << " collectors: "
            << in_place << " on their owner, " << moves.size() << " to move, " << live.size()
            << " live on another collector (not moved)" << std::endl;
  for (const auto& [trial, holder] : live) {
    std::cout << "skipped (live): " << trial << " on " << holder << " (owner "
              << RendezvousOwner(addresses, trial) << "); move it once it has ended" << std::endl;
  }
  const int unlisted = listing.failures.empty() ? 0 : kUnlisted;
  if (dry_run) {
    for (const Move& m : moves) {
      std::cout << "would move: " << m.trial << " from " << m.holder->address() << " to "
                << m.owner->address() << " (" << m.summary.num_steps() << " steps, "
                << m.summary.workers_size() << " workers, " << m.summary.num_tensors()
                << " tensors)" << (m.owner_has_it ? "; the owner holds a copy already" : "")
                << std::endl;
    }
    return unlisted;
  }
  size_t moved = 0, failed = 0;
  for (size_t i = 0; i < moves.size(); ++i) {
    const Move& m = moves[i];
    std::cout << "[" << i + 1 << "/" << moves.size() << "] moving " << m.trial << " from "
              << m.holder->address() << " to " << m.owner->address() << std::endl;
    const absl::Status s = MoveTrial(m, security);
    if (s.ok()) {
      ++moved;
    } else {
      ++failed;
      std::cerr << "tensorkeep: moving trial " << m.trial << " failed (the original stays on "
                << m.holder->address() << "; run rebalance again): " << s.message() << "\n";
    }
  }
  std::cout << "moved " << moved << " of " << moves.size() << " trials";
  if (failed > 0) std::cout << ", " << failed << " failed";
  std::cout << "; " << live.size() << " live skipped" << std::endl;
  if (failed > 0) return 1;
  return unlisted;
}

}  // namespace cli
}  // namespace tensorkeep
