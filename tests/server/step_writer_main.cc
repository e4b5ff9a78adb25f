// step_writer: a training worker as a process of its own, for tests that kill
// one (lost_worker_test).
//
//   step_writer SERVER TRIAL WORKER NUM_WORKERS FIRST_STEP LAST_STEP [close|eot|hold]
//
// Writes one float32 tensor "w" at every global step FIRST_STEP..LAST_STEP
// (TRAIN mode, mode step = global step) and ends each step, flushes, and
// prints "flushed" on stdout. Then: `hold` (the default) waits until killed
// with its stream open; `close` closes without end-of-training; `eot` closes
// with end-of-training. Exits 1 with the error on stderr when a write fails.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/writer.h"

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: step_writer SERVER TRIAL WORKER NUM_WORKERS FIRST LAST [mode]\n");
    return 2;
  }
  tensorkeep::client::WriterOptions options;
  options.server = argv[1];
  options.trial = argv[2];
  options.worker = argv[3];
  options.num_workers = static_cast<uint32_t>(std::atoi(argv[4]));
  const uint64_t first = std::strtoull(argv[5], nullptr, 10);
  const uint64_t last = std::strtoull(argv[6], nullptr, 10);
  const std::string then = argc > 7 ? argv[7] : "hold";
  auto writer = tensorkeep::client::Writer::Open(options);
  if (!writer.ok()) {
    std::fprintf(stderr, "%s\n", writer.status().ToString().c_str());
    return 1;
  }
  for (uint64_t step = first; step <= last; ++step) {
    tensorkeep::v1::TensorRecord r;
    r.set_name("w");
    r.set_step(step);
    r.set_mode(tensorkeep::v1::TRAIN);
    r.set_mode_step(step);
    r.set_dtype(tensorkeep::v1::FLOAT32);
    r.add_shape(1);
    r.set_has_value(true);
    const float v = static_cast<float>(step);
    r.set_data(std::string(reinterpret_cast<const char*>(&v), sizeof(v)));
    absl::Status s = (*writer)->Write(std::move(r));
    if (s.ok()) s = (*writer)->EndStep(step);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  absl::Status s = (*writer)->Flush();
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("flushed\n");
  std::fflush(stdout);
  if (then == "close" || then == "eot") {
    s = (*writer)->Close(then == "eot");
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    return 0;
  }
  for (;;) pause();
}
