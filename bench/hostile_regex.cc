#include "bench/hostile_regex.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "bench/subprocess.h"
#include "client/connection.h"
#include "client/trial.h"
#include "client/writer.h"

namespace tensorkeep {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

v1::TensorRecord Bytes(const std::string& name, uint64_t step, size_t n) {
  v1::TensorRecord r;
  r.set_name(name);
  r.set_step(step);
  r.set_mode(v1::TRAIN);
  r.set_mode_step(step);
  r.set_dtype(v1::UINT8);
  r.add_shape(static_cast<int64_t>(n));
  r.set_has_value(true);
  r.set_value_size(n);
  r.set_data(std::string(n, static_cast<char>(step)));
  return r;
}

struct Hostility {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> refused{0};  // BAD_REQUEST: a pattern RE2 cannot run
  std::atomic<uint64_t> failed{0};   // anything else
};

// The hostile clients' loop: catastrophic patterns for a backtracking engine,
// one after the other, until `stop`.
void Hostile(const std::string& address, const std::atomic<bool>& stop, Hostility* h) {
  auto connection = Connection::Open(address);
  if (!connection.ok()) {
    ++h->failed;
    return;
  }
  client::Trial planted(*connection, "planted");
  const std::vector<std::vector<std::string>> patterns = {
      {"(a+)+$"},
      {"(a|aa)+$", "(a*)*b"},
      {std::string(1500, '(') + "a" + std::string(1500, ')') + "*$"},
  };
  for (size_t i = 0; !stop.load(); ++i) {
    auto names = planted.TensorNames(std::nullopt, client::kGlobal, patterns[i % patterns.size()]);
    ++h->calls;
    if (!names.ok()) ++(GetReason(names.status()) == Reason::kBadRequest ? h->refused : h->failed);
  }
}

// One round: `writers` writers push steps of 4 values for `seconds` and close
// (durable); returns their aggregate MB/s (10^6 B/s), the hostile clients
// running meanwhile when `hostile`.
absl::StatusOr<double> Round(const HostileRegexOptions& o, const std::string& address, int round,
                             bool hostile, Hostility* h) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> attackers;
  if (hostile) {
    for (int i = 0; i < o.hostile_clients; ++i) {
      attackers.emplace_back([&] { Hostile(address, stop, h); });
    }
  }
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> failures{0};
  const auto start = Clock::now();
  const auto until = start + std::chrono::milliseconds(static_cast<int64_t>(o.round_seconds * 1e3));
  std::vector<std::thread> writers;
  for (int w = 0; w < o.writers; ++w) {
    writers.emplace_back([&, w] {
      client::WriterOptions wo;
      wo.server = address;
      wo.trial = absl::StrCat("push-", round, hostile ? "-hostile-" : "-quiet-", w);
      wo.retry_timeout_seconds = 0;
      auto writer = client::Writer::Open(wo);
      if (!writer.ok()) {
        ++failures;
        return;
      }
      uint64_t step = 0;
      for (; Clock::now() < until; ++step) {
        for (int t = 0; t < 4; ++t) {
          if (!(*writer)->Write(Bytes(absl::StrCat("t", t), step, o.value_bytes)).ok()) {
            ++failures;
            return;
          }
        }
        if (!(*writer)->EndStep(step).ok()) {
          ++failures;
          return;
        }
      }
      if (!(*writer)->Close(true).ok()) {
        ++failures;
        return;
      }
      bytes += step * 4 * o.value_bytes;
    });
  }
  for (auto& t : writers) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  for (auto& t : attackers) t.join();
  if (failures > 0) {
    return absl::InternalError(absl::StrCat(failures.load(), " writers failed in round ", round,
                                            hostile ? " (hostile)" : " (quiet)"));
  }
  return bytes.load() / seconds / 1e6;
}

}  // namespace

absl::StatusOr<std::vector<Result>> RunHostileRegex(const HostileRegexOptions& o) {
  TK_ASSIGN_OR_RETURN(ServerProcess server, SpawnServer(o.server_binary, o.data_dir));
  // Names that make `(a+)+$` take exponential time in a backtracking engine
  // (a run of a's, then something else): 36 a's took std::regex minutes.
  {
    client::WriterOptions wo;
    wo.server = server.address;
    wo.trial = "planted";
    TK_ASSIGN_OR_RETURN(auto writer, client::Writer::Open(wo));
    for (int i = 0; i < 200; ++i) {
      TK_RETURN_IF_ERROR(writer->Write(Bytes(absl::StrCat(std::string(36, 'a'), "!", i), 0, 4)));
    }
    TK_RETURN_IF_ERROR(writer->EndStep(0));
    TK_RETURN_IF_ERROR(writer->Close(true));
  }
  Hostility h;
  std::vector<double> quiet, hostile;
  for (int round = 0; round < o.rounds; ++round) {
    TK_ASSIGN_OR_RETURN(double q, Round(o, server.address, round, false, &h));
    TK_ASSIGN_OR_RETURN(double x, Round(o, server.address, round, true, &h));
    quiet.push_back(q);
    hostile.push_back(x);
  }
  server.process->Signal(SIGTERM);
  const int code = server.process->Wait(30);
  std::error_code ec;
  std::filesystem::remove_all(o.data_dir, ec);
  if (code != 0) return absl::InternalError(absl::StrCat("tensorkeep-server exited with ", code));
  if (h.failed > 0) {
    return absl::InternalError(
        absl::StrCat(h.failed.load(), " hostile queries failed other than BAD_REQUEST"));
  }
  const double q = *std::max_element(quiet.begin(), quiet.end());
  const double x = *std::max_element(hostile.begin(), hostile.end());
  const std::string shape =
      absl::StrFormat("%d writers x %s values", o.writers,
                      o.value_bytes >= 1024 ? absl::StrCat(o.value_bytes >> 10, " KiB")
                                            : absl::StrCat(o.value_bytes, " B"));
  Result a;
  a.name = "hostile-regex/quiet";
  a.value = q;
  a.unit = "MB/s";
  a.figure_text = absl::StrFormat("%.1f MB/s (%s, best of %d)", q, shape, o.rounds);
  std::vector<Result> out;
  out.push_back(a);
  Result b;
  b.name = "hostile-regex/hostile";
  b.value = x;
  b.unit = "MB/s";
  b.figure_text = absl::StrFormat(
      "%.1f MB/s with %d clients sending %llu catastrophic patterns "
      "(%llu refused by RE2)",
      x, o.hostile_clients, static_cast<unsigned long long>(h.calls.load()),
      static_cast<unsigned long long>(h.refused.load()));
  b.baseline_name = "quiet";
  b.baseline = q;
  b.baseline_text = a.figure_text;
  b.target = ">= 0.50x quiet (writers within 2x)";
  b.Judge(b.ratio() >= 0.5);
  b.extra = {{"hostile_calls", static_cast<double>(h.calls.load())},
             {"refused_by_re2", static_cast<double>(h.refused.load())}};
  out.push_back(b);
  return out;
}

}  // namespace bench
}  // namespace tensorkeep
