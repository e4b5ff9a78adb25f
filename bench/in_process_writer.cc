// in_process_writer: the other shape issue 16 names — the C++ writer inside
// the training process (what a pybind11 binding would run) — measured by the
// training process's CPU per saved step, the target's own figure.
//
//   in_process_writer SERVER [--steps N] [--rounds R]
//
// Each step saves what bench/agent_bench.py's MLP saves (784-256-10: weights,
// biases, their gradients and the loss, ~1.6 MB) from source buffers that a
// "training" pass rewrites first, so that the copies start from the caches
// as they would after a training step. Configurations, alternating in rounds:
//   floor   the copy of the saved tensors into preallocated buffers alone (the
//           snapshot the training process cannot avoid; agent_bench's floor);
//   writer  the copy into each record's data, Write and EndStep of a
//           client::Writer pushing to SERVER (its gRPC threads are this
//           process's: serialization, send, acks).
// Prints per configuration the process CPU per step (all threads,
// getrusage) over the "training" pass alone, medians over rounds, and the
// writer's CPU over the floor; the last line is one JSON object. Pin it to a
// CPU of its own and the collector to another, as agent_bench.py does
// (taskset); a binding would add Python's per-tensor work on top of this
// figure, so it is the binding's lower bound.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/percentile.h"
#include "client/writer.h"

namespace {

using tensorkeep::bench::Median;

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Tensor {
  std::string name;
  std::vector<float> data;
};

// The MLP's saved tensors, with smdebug's names as the hook gives them.
std::vector<Tensor> SavedTensors() {
  const std::vector<std::pair<std::string, size_t>> shapes = {
      {"Sequential_0.weight", 256 * 784},
      {"Sequential_0.bias", 256},
      {"Sequential_2.weight", 10 * 256},
      {"Sequential_2.bias", 10},
      {"gradient/Sequential_0.weight", 256 * 784},
      {"gradient/Sequential_0.bias", 256},
      {"gradient/Sequential_2.weight", 10 * 256},
      {"gradient/Sequential_2.bias", 10},
      {"CrossEntropyLoss_output_0", 1}};
  std::vector<Tensor> out;
  for (const auto& [name, n] : shapes) out.push_back({name, std::vector<float>(n, 0.5f)});
  return out;
}

// Rewrites every source value, as a training step updates weights and
// gradients (and brings them into this core's caches).
void Train(std::vector<Tensor>* tensors, uint64_t step) {
  const float d = 1e-6f * static_cast<float>(step % 7);
  for (auto& t : *tensors) {
    for (float& x : t.data) x += d;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: in_process_writer SERVER [--steps N] [--rounds R]\n");
    return 2;
  }
  const std::string server = argv[1];
  int steps = 300;
  int rounds = 5;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") steps = std::max(1, std::atoi(argv[i + 1]));
    if (flag == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  std::vector<Tensor> tensors = SavedTensors();
  size_t step_bytes = 0;
  for (const auto& t : tensors) step_bytes += t.data.size() * sizeof(float);
  std::vector<std::vector<char>> buffers;
  for (const auto& t : tensors) buffers.emplace_back(t.data.size() * sizeof(float));

  tensorkeep::client::WriterOptions options;
  options.server = server;
  options.trial = "bench-in-process-" + std::to_string(::getpid());
  auto writer = tensorkeep::client::Writer::Open(options);
  if (!writer.ok()) {
    std::fprintf(stderr, "in_process_writer: %s\n", writer.status().ToString().c_str());
    return 1;
  }
  uint64_t global_step = 0;
  // Process CPU per step of the training pass alone, of floor and of writer.
  auto run = [&](const std::string& config) -> double {
    const double cpu0 = ProcessCpuSeconds();
    for (int s = 0; s < steps; ++s, ++global_step) {
      Train(&tensors, global_step);
      if (config == "floor") {
        for (size_t k = 0; k < tensors.size(); ++k) {
          std::memcpy(buffers[k].data(), tensors[k].data.data(), buffers[k].size());
        }
      } else if (config == "writer") {
        for (const auto& t : tensors) {
          tensorkeep::v1::TensorRecord r;
          r.set_name(t.name);
          r.set_step(global_step);
          r.set_mode(tensorkeep::v1::TRAIN);
          r.set_mode_step(global_step);
          r.set_dtype(tensorkeep::v1::FLOAT32);
          r.add_shape(static_cast<int64_t>(t.data.size()));
          r.set_has_value(true);
          r.set_data(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
          absl::Status w = (*writer)->Write(std::move(r));
          if (!w.ok()) {
            std::fprintf(stderr, "in_process_writer: %s\n", w.ToString().c_str());
            std::exit(1);
          }
        }
        absl::Status e = (*writer)->EndStep(global_step);
        if (!e.ok()) {
          std::fprintf(stderr, "in_process_writer: %s\n", e.ToString().c_str());
          std::exit(1);
        }
      }
    }
    if (config == "writer") {
      // What the step sent is counted in full: its acks, not the next round's.
      absl::Status f = (*writer)->Flush();
      if (!f.ok()) {
        std::fprintf(stderr, "in_process_writer: %s\n", f.ToString().c_str());
        std::exit(1);
      }
    }
    return (ProcessCpuSeconds() - cpu0) / steps * 1e3;
  };
  const std::vector<std::string> configs = {"train", "floor", "writer"};
  std::vector<double> floor_over, writer_over;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::string> order = configs;
    if (r % 2 == 1) std::reverse(order.begin(), order.end());
    double ms[3] = {0, 0, 0};
    for (const auto& c : order) {
      const size_t i = std::find(configs.begin(), configs.end(), c) - configs.begin();
      ms[i] = run(c);
    }
    floor_over.push_back(ms[1] - ms[0]);
    writer_over.push_back(ms[2] - ms[0]);
  }
  absl::Status closed = (*writer)->Close(/*end_of_training=*/true);
  if (!closed.ok()) {
    std::fprintf(stderr, "in_process_writer: close: %s\n", closed.ToString().c_str());
    return 1;
  }
  const double floor = Median(floor_over);
  const double over = Median(writer_over);
  std::printf(
      "in-process C++ writer: %d rounds x %d steps of %.2f MB; process CPU per step over the "
      "training pass, medians\n",
      rounds, steps, static_cast<double>(step_bytes) / 1e6);
  std::printf("floor (the copy alone)  %+.3f ms\n", floor);
  std::printf("writer                  %+.3f ms  (%.2f x the floor)\n", over, over / floor);
  std::printf(
      "{\"step_bytes\": %zu, \"floor_cpu_ms\": %.4f, \"writer_cpu_ms\": %.4f, \"ratio\": %.3f}\n",
      step_bytes, floor, over, over / floor);
  return 0;
}
