#include "bench/reclaim.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "client/connection.h"
#include "client/trial.h"
#include "client/writer.h"
#include "server/collector_server.h"

namespace tensorkeep {
namespace bench {
namespace {

namespace fs = std::filesystem;

// Bytes of every file under `dir` (what du counts, less block rounding).
uint64_t DiskUse(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return total;
}

double MiB(uint64_t bytes) { return bytes / 1048576.0; }

// Bytes this process has passed to write(2) and the like (/proc/self/io
// wchar); 0 when unknown.
uint64_t BytesWritten() {
  FILE* f = std::fopen("/proc/self/io", "r");
  if (f == nullptr) return 0;
  char line[128];
  unsigned long long n = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "wchar: %llu", &n) == 1) break;
  }
  std::fclose(f);
  return n;
}

// Writes `steps` steps of one value to `trial`.
absl::Status WriteTrial(const std::string& address, const std::string& trial, uint64_t steps,
                        const std::string& value) {
  client::WriterOptions o;
  o.server = address;
  o.trial = trial;
  TK_ASSIGN_OR_RETURN(auto w, client::Writer::Open(o));
  for (uint64_t step = 0; step < steps; ++step) {
    v1::TensorRecord r;
    r.set_name("weights");
    r.set_step(step);
    r.set_mode(v1::GLOBAL);
    r.set_mode_step(step);
    r.set_dtype(v1::FLOAT32);
    r.add_shape(static_cast<int64_t>(value.size() / 4));
    r.set_has_value(true);
    r.set_data(value);
    TK_RETURN_IF_ERROR(w->Write(std::move(r)));
    TK_RETURN_IF_ERROR(w->EndStep(step));
  }
  return w->Close(true);
}

absl::StatusOr<Result> RunLayout(const ReclaimOptions& options, bool concurrent) {
  const std::string layout = concurrent ? "concurrent" : "sequential";
  const std::string dir = absl::StrCat(options.data_dir, "/", layout);
  ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.store.path = dir;
  so.store.value_file_bytes = options.value_file_bytes;
  if (options.value_lanes > 0) so.store.value_lanes = options.value_lanes;
  if (options.gc_threshold >= 0) so.store.value_gc_live_fraction = options.gc_threshold;
  so.collector.sync = options.sync;
  TK_ASSIGN_OR_RETURN(auto server, CollectorServer::Start(so));
  const uint64_t before = DiskUse(dir);
  std::string value(options.value_bytes, '\0');
  std::mt19937 rng(7);
  for (char& c : value) c = static_cast<char>(rng());
  const uint64_t steps = std::max<uint64_t>(1, options.trial_bytes / options.value_bytes);
  const auto name = [](int t) { return absl::StrCat("reclaim-", t); };
  const auto write_start = std::chrono::steady_clock::now();
  if (concurrent) {
    std::vector<std::thread> threads;
    std::vector<absl::Status> status(options.trials);
    for (int t = 0; t < options.trials; ++t) {
      threads.emplace_back([&, t] { status[t] = WriteTrial(server->address(), name(t), steps, value); });
    }
    for (auto& th : threads) th.join();
    for (const absl::Status& s : status) TK_RETURN_IF_ERROR(s);
  } else {
    for (int t = 0; t < options.trials; ++t) {
      TK_RETURN_IF_ERROR(WriteTrial(server->address(), name(t), steps, value));
    }
  }
  const double write_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - write_start).count();
  const uint64_t written = DiskUse(dir);
  TK_ASSIGN_OR_RETURN(auto connection, Connection::Open(server->address()));
  const uint64_t wchar_before = BytesWritten();
  const auto start = std::chrono::steady_clock::now();
  int deleted = 0;
  for (int t = 0; t < options.trials; t += 2) {
    TK_RETURN_IF_ERROR(client::Trial(connection, name(t)).Delete(/*wait_reclaimed=*/false).status());
    ++deleted;
  }
  const uint64_t after_delete = DiskUse(dir);
  // The reclaim runs in the background: bounded wait for it.
  for (int i = 0; i < 12000 && server->collector()->reclaims_pending() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (server->collector()->reclaims_pending() > 0) {
    return absl::DeadlineExceededError("reclaim: the space was not reclaimed within 120 s");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t reclaim_wrote = BytesWritten() - wchar_before;
  const uint64_t after_gc = DiskUse(dir);
  const TensorStore::SpaceStats space = server->collector()->store()->Space();
  server.reset();
  std::error_code ec;
  fs::remove_all(dir, ec);

  // The deleted trials' share of what writing took.
  const uint64_t grown = written > before ? written - before : 0;
  const uint64_t deleted_bytes = grown * deleted / options.trials;
  const uint64_t reclaimed = written > after_gc ? written - after_gc : 0;
  Result r;
  r.name = absl::StrCat("reclaim/", layout, "/", options.trials, "x", options.trial_bytes >> 20,
                        "MiB");
  r.value = MiB(reclaimed);
  r.unit = "MiB";
  r.figure_text = absl::StrFormat(
      "%.1f MiB reclaimed (disk: %.1f empty, %.1f written at %.0f MB/s, %.1f deleted, %.1f "
      "reclaimed, in %.1f s, writing %.1f MiB)",
      MiB(reclaimed), MiB(before), MiB(written), (written - before) / 1e6 / write_seconds,
      MiB(after_delete), MiB(after_gc), seconds, MiB(reclaim_wrote));
  r.baseline_name = "deleted trials' share";
  r.baseline = MiB(deleted_bytes);
  r.baseline_text = absl::StrFormat("%.1f MiB deleted", MiB(deleted_bytes));
  r.target = ">= 0.90x deleted";
  r.Judge(deleted_bytes > 0 && reclaimed >= deleted_bytes * 0.9);
  r.extra["disk_empty_bytes"] = before;
  r.extra["disk_written_bytes"] = written;
  r.extra["disk_after_delete_bytes"] = after_delete;
  r.extra["disk_after_reclaim_bytes"] = after_gc;
  r.extra["reclaim_seconds"] = seconds;
  r.extra["write_seconds"] = write_seconds;
  r.extra["reclaim_bytes_written"] = reclaim_wrote;
  r.extra["write_amplification"] =
      deleted_bytes > 0 ? static_cast<double>(reclaim_wrote) / deleted_bytes : 0.0;
  r.extra["value_garbage_bytes_left"] = space.value_garbage_bytes;
  return r;
}

}  // namespace

absl::StatusOr<std::vector<Result>> RunReclaim(const ReclaimOptions& options) {
  std::vector<Result> out;
  for (bool concurrent : {false, true}) {
    TK_ASSIGN_OR_RETURN(Result r, RunLayout(options, concurrent));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace bench
}  // namespace tensorkeep
