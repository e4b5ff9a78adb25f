#include "client/cluster.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/collector_list.h"
#include "base/errors.h"
#include "base/rendezvous.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace {

// How long one collector may take to say whether it holds a trial.
constexpr double kLocateSeconds = 10;
// A collector that did not answer at once (its channel in a reconnection
// backoff, e.g. it just restarted) is asked once more, waiting this long for
// a connection: what a collector that is down costs a walk or a listing.
constexpr double kRetrySeconds = 2;

std::chrono::system_clock::time_point Deadline(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Calls `call(context)` on `connection`; an UNAVAILABLE without a reason is
// tried once more, waiting up to kRetrySeconds for the connection.
template <typename Call>
absl::Status CallWithRetry(const Connection& connection, double timeout_seconds, Call call) {
  absl::Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    grpc::ClientContext cc;
    cc.set_deadline(Deadline(attempt == 0 ? timeout_seconds : kRetrySeconds));
    if (attempt > 0) cc.set_wait_for_ready(true);
    s = FromGrpc(call(&cc), &cc, connection);
    if (!absl::IsUnavailable(s) || GetReason(s) != Reason::kNone) return s;
  }
  return s;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveServers(const std::vector<std::string>& given) {
  std::vector<std::string> nonempty;
  for (const auto& g : given) {
    if (!g.empty()) nonempty.push_back(g);
  }
  if (!nonempty.empty()) return ParseCollectorList(absl::StrJoin(nonempty, ","), "--server");
  const char* env = std::getenv(kServersEnv);
  if (env != nullptr && *env != '\0') return ParseCollectorList(env, kServersEnv);
  return std::vector<std::string>{ResolveServer("")};
}

absl::StatusOr<std::shared_ptr<Cluster>> Cluster::Open(const std::vector<std::string>& addresses,
                                                       const ClientSecurity& security) {
  if (addresses.empty()) return absl::InvalidArgumentError("no collector given");
  std::vector<std::shared_ptr<Connection>> connections;
  for (const auto& a : addresses) {
    auto c = Connection::Open(a, security);
    if (!c.ok()) return c.status();
    connections.push_back(std::move(*c));
  }
  return std::shared_ptr<Cluster>(new Cluster(std::move(connections)));
}

absl::StatusOr<std::shared_ptr<Cluster>> Cluster::Open(const std::string& servers,
                                                       const ClientSecurity& security) {
  auto addresses = ResolveServers({servers});
  if (!addresses.ok()) return addresses.status();
  return Open(*addresses, security);
}

std::vector<std::shared_ptr<Connection>> Cluster::Ranking(const std::string& trial) const {
  std::map<std::string, std::shared_ptr<Connection>> by_address;
  std::vector<std::string> addresses;
  for (const auto& c : connections_) {
    by_address[c->address()] = c;
    addresses.push_back(c->address());
  }
  std::vector<std::shared_ptr<Connection>> out;
  for (const auto& a : RendezvousRanking(addresses, trial)) out.push_back(by_address[a]);
  return out;
}

absl::StatusOr<std::shared_ptr<Connection>> Cluster::Locate(const std::string& trial,
                                                            Purpose purpose) const {
  if (connections_.size() == 1) return connections_.front();
  const auto ranking = Ranking(trial);
  std::vector<std::pair<std::string, absl::Status>> unreachable;
  for (const auto& c : ranking) {
    v1::TrialRef ref;
    ref.set_trial(trial);
    v1::TrialSummary summary;
    const absl::Status s = CallWithRetry(*c, kLocateSeconds, [&](grpc::ClientContext* cc) {
      return c->stub()->GetTrial(cc, ref, &summary);
    });
    if (s.ok()) return c;
    if (GetReason(s) == Reason::kTrialNotFound) continue;
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      unreachable.emplace_back(c->address(), s);
      continue;
    }
    return s;
  }
  if (unreachable.empty() || purpose == Purpose::kWrite) {
    for (const auto& [address, status] : unreachable) {
      spdlog::warn("trial '{}' goes to its owner {}: the collector at {} could not be asked "
                   "whether it holds it ({})",
                   trial, ranking.front()->address(), address, std::string(status.message()));
    }
    return ranking.front();
  }
  return absl::UnavailableError(absl::StrCat(
      "trial '", trial, "' is on none of the collectors that answered; the collector at ",
      unreachable.front().first, ", which may hold it, cannot be reached: ",
      unreachable.front().second.message()));
}

Cluster::Listing Cluster::ListTrials(double timeout_seconds) const {
  struct Answer {
    absl::Status status;
    v1::ListTrialsResponse response;
  };
  std::vector<std::future<Answer>> answers;
  for (const auto& c : connections_) {
    answers.push_back(std::async(std::launch::async, [c, timeout_seconds] {
      Answer a;
      a.status = CallWithRetry(*c, timeout_seconds, [&](grpc::ClientContext* cc) {
        a.response.Clear();
        return c->stub()->ListTrials(cc, {}, &a.response);
      });
      return a;
    }));
  }
  Listing out;
  for (size_t i = 0; i < connections_.size(); ++i) {
    Answer a = answers[i].get();
    const std::string& address = connections_[i]->address();
    if (!a.status.ok()) {
      out.failures.emplace_back(address, a.status);
      continue;
    }
    for (auto& t : *a.response.mutable_trials()) out.trials.emplace_back(address, std::move(t));
  }
  std::stable_sort(out.trials.begin(), out.trials.end(), [](const auto& a, const auto& b) {
    return a.second.name() < b.second.name();
  });
  return out;
}

absl::StatusOr<std::shared_ptr<Connection>> ConnectForTrial(const std::string& servers,
                                                           const std::string& trial,
                                                           const ClientSecurity& security,
                                                           Cluster::Purpose purpose) {
  auto cluster = Cluster::Open(servers, security);
  if (!cluster.ok()) return cluster.status();
  return (*cluster)->Locate(trial, purpose);
}

}  // namespace tensorkeep
