// The soak of issue 11: a real tensorkeep-server process under many writers
// for minutes, with readers checking answers while it ingests, then a
// verifier reading everything back.
//
// Writers (one client::Writer each; trials of up to 4 workers, so that a
// step is complete only when all of its workers ended it) write steps of
// float64 scalars, 4 KiB, 64 KiB and now and then 1 MiB float32 values whose
// bytes are a function of (trial, worker, step, tensor), ending every step
// and flushing regularly, at a bounded aggregate rate, until the time is up;
// then Close(end_of_training). Readers ask GetValue and reductions of random
// complete steps (and a few not yet complete ones) and compare with values
// and reductions recomputed here. The verifier streams every (trial, worker,
// tensor) back and checks: no acknowledged record missing, no value
// different, no record twice, no step that was never written.
//
// Thread safety: RunSoak is called from one thread; it runs its own.
#ifndef TENSORKEEP_BENCH_SOAK_H_
#define TENSORKEEP_BENCH_SOAK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/report.h"

namespace tensorkeep {
namespace bench {

struct SoakOptions {
  std::string server_binary;  // tensorkeep-server to start
  std::string data_dir;       // its --data-dir (created by it; removed after)
  double seconds = 600;       // how long the writers write
  int writers = 64;
  int readers = 8;
  int workers_per_trial = 4;  // num_workers of each trial (the last may have fewer)
  // Aggregate cap of the writers in MB/s (10^6 B): the soak is about hours of
  // training in minutes, not peak ingest, and 600 s unthrottled would fill
  // the disk (~0.6 GB/s here). 0: no cap.
  double max_mbps = 40;
};

// Runs the soak. Returns its result lines (soak/ingest, soak/read, soak/rss,
// soak/verify), the last judged met only if nothing was missing, different
// or duplicated, no reader saw a wrong answer and the server exited 0 on
// SIGTERM. An error only if the soak could not run (server did not start).
absl::StatusOr<std::vector<Result>> RunSoak(const SoakOptions& options);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_SOAK_H_
