#include "bench/soak.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "bench/baselines.h"
#include "bench/percentile.h"
#include "bench/subprocess.h"
#include "client/connection.h"
#include "client/trial.h"
#include "client/writer.h"

namespace tensorkeep {
namespace bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ------------------------------------------------------------ contents

// One tensor of every step: float64 scalars, else float32 vectors. Present at
// the steps where (step + global writer index) % every == 0, so that the
// 1 MiB ones are spread over the writers' steps.
struct TensorSpec {
  const char* name;
  size_t bytes;
  uint64_t every;
};
constexpr TensorSpec kTensors[] = {
    {"loss", 8, 1},
    {"accuracy", 8, 1},
    {"lr", 8, 1},
    {"grad_norm", 8, 1},
    {"layer0/weights", 4096, 1},
    {"layer1/weights", 4096, 1},
    {"layer2/weights", 4096, 1},
    {"layer3/weights", 4096, 1},
    {"layer0/activations", 65536, 1},
    {"embeddings", 1u << 20, 32},
};
constexpr int kNumTensors = sizeof(kTensors) / sizeof(kTensors[0]);

// splitmix64's finalizer.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Seed(int trial, int worker, uint64_t step, int tensor) {
  return Mix(Mix(Mix(static_cast<uint64_t>(trial) << 32 | static_cast<uint32_t>(worker)) ^ step) ^
             static_cast<uint64_t>(tensor + 1));
}

// The bytes of tensor `tensor` of (trial, worker, step): float32 in [-1, 1)
// with 24 random bits each (exact), or one float64 in [-5, 5).
std::string Content(int trial, int worker, uint64_t step, int tensor) {
  const TensorSpec& spec = kTensors[tensor];
  const uint64_t seed = Seed(trial, worker, step, tensor);
  std::string out(spec.bytes, '\0');
  if (spec.bytes == 8) {
    const double d = static_cast<double>(Mix(seed) >> 11) * 0x1p-53 * 10 - 5;
    std::memcpy(out.data(), &d, 8);
    return out;
  }
  const size_t n = spec.bytes / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(Mix(seed + i) >> 40) * 0x1p-23f - 1.0f;
    std::memcpy(out.data() + i * sizeof(float), &f, sizeof(float));
  }
  return out;
}

int DTypeOf(const TensorSpec& spec) { return spec.bytes == 8 ? v1::FLOAT64 : v1::FLOAT32; }

std::vector<int64_t> ShapeOf(const TensorSpec& spec) {
  if (spec.bytes == 8) return {};
  return {static_cast<int64_t>(spec.bytes / sizeof(float))};
}

v1::TensorRecord MakeRecord(int tensor, uint64_t step, std::string data) {
  const TensorSpec& spec = kTensors[tensor];
  v1::TensorRecord r;
  r.set_name(spec.name);
  r.set_step(step);
  r.set_mode(v1::GLOBAL);
  r.set_mode_step(step);
  r.set_has_value(true);
  r.set_dtype(static_cast<v1::DType>(DTypeOf(spec)));
  for (int64_t d : ShapeOf(spec)) r.add_shape(d);
  r.set_data(std::move(data));
  return r;
}

// The reductions the server offers, computed here independently: numpy's on
// the values as float64, population std/variance, prod in element order.
const char* const kReductionNames[] = {"min", "max",  "mean", "std", "variance",
                                       "sum", "prod", "l1",   "l2"};
constexpr int kNumReductions = 9;

double LocalReduction(const std::string& data, bool is_f64, const std::string& kind, bool abs) {
  std::vector<double> x;
  if (is_f64) {
    x.resize(data.size() / 8);
    std::memcpy(x.data(), data.data(), x.size() * 8);
  } else {
    const size_t n = data.size() / 4;
    x.resize(n);
    for (size_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, data.data() + i * 4, 4);
      x[i] = f;
    }
  }
  if (abs) {
    for (double& v : x) v = std::fabs(v);
  }
  const double n = static_cast<double>(x.size());
  double sum = 0, l1 = 0, sq = 0, prod = 1;
  double mn = x[0], mx = x[0];
  for (double v : x) {
    sum += v;
    l1 += std::fabs(v);
    sq += v * v;
    prod *= v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  const double mean = sum / n;
  double var = 0;
  for (double v : x) var += (v - mean) * (v - mean);
  var /= n;
  if (kind == "min") return mn;
  if (kind == "max") return mx;
  if (kind == "mean") return mean;
  if (kind == "std") return std::sqrt(var);
  if (kind == "variance") return var;
  if (kind == "sum") return sum;
  if (kind == "prod") return prod;
  if (kind == "l1") return l1;
  return std::sqrt(sq);
}

// Summation order differs (the server sums in lanes with compensation), so
// only the last bits may differ; min, max and prod are exact.
bool CloseEnough(double got, double want) {
  if (got == want) return true;
  return std::fabs(got - want) <= 1e-9 * std::max(1.0, std::fabs(want));
}

// ------------------------------------------------------------ shared state

struct WriterState {
  int trial = 0;
  int worker = 0;  // index within the trial
  int global = 0;  // index among all writers
  std::string trial_name;
  std::string worker_name;
  std::unique_ptr<client::Writer> writer;
  // The highest step whose records Write() may have started (-1: none yet).
  std::atomic<int64_t> started{-1};
  // The highest step that was ended and then flushed: durable and committed.
  std::atomic<int64_t> acked{-1};
  // Written by the writer thread only; read after it is joined.
  int64_t ended = -1;  // the highest step EndStep() accepted
  uint64_t bytes = 0;
  uint64_t records = 0;
  uint64_t flushes = 0;
  absl::Status error;

  bool Present(uint64_t step, int tensor) const {
    return (step + static_cast<uint64_t>(global)) % kTensors[tensor].every == 0;
  }
};

// Counts of the readers and the verifier, and the first problems in words.
struct Problems {
  std::mutex mu;
  std::vector<std::string> first;
  void Note(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (first.size() < 200) {
      first.push_back(what);
      std::fprintf(stderr, "  [soak PROBLEM: %s]\n", what.c_str());
    }
  }
};

struct ReaderCounts {
  uint64_t value_checks = 0;
  uint64_t reduction_checks = 0;  // reductions compared (several per call)
  uint64_t calls = 0;
  uint64_t mismatches = 0;
  uint64_t not_yet = 0;          // a step not complete yet: an accepted answer
  uint64_t errors = 0;           // an error for a complete step, or an unexpected one
  std::vector<float> latencies;  // seconds per call
};

std::string Where(const WriterState& ws, uint64_t step, int tensor) {
  return absl::StrCat(ws.trial_name, " ", ws.worker_name, " step ", step, " ",
                      kTensors[tensor].name);
}

// One reader: random (trial, worker, tensor, step) until `stop`; 9 in 10
// asks are of steps every worker of the trial has flushed (complete, so any
// error is one), the rest just past them (not yet complete is fine).
void ReaderLoop(const std::string& address, int seed,
                const std::vector<std::vector<WriterState*>>& trials, const std::atomic<bool>& stop,
                ReaderCounts* counts, Problems* problems) {
  auto connection = Connection::Open(address);
  if (!connection.ok()) {
    ++counts->errors;
    problems->Note(absl::StrCat("reader cannot connect: ", connection.status().ToString()));
    return;
  }
  std::mt19937_64 rng(1000 + seed);
  while (!stop.load()) {
    const auto& trial = trials[rng() % trials.size()];
    const WriterState& ws = *trial[rng() % trial.size()];
    int64_t bound = INT64_MAX;
    for (const WriterState* w : trial) bound = std::min(bound, w->acked.load());
    if (bound < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const bool complete = rng() % 10 != 0;
    const uint64_t step = complete ? rng() % static_cast<uint64_t>(bound + 1)
                                   : static_cast<uint64_t>(bound) + 1 + rng() % 4;
    int tensor = static_cast<int>(rng() % kNumTensors);
    if (complete && !ws.Present(step, tensor)) tensor = static_cast<int>(rng() % (kNumTensors - 1));
    const TensorSpec& spec = kTensors[tensor];
    client::Tensor t(*connection, ws.trial_name, spec.name);
    const bool ask_value = rng() % 2 == 0;
    std::vector<std::pair<std::string, bool>> reductions;
    if (!ask_value) {
      for (int i = 0; i < 3; ++i) {
        reductions.emplace_back(kReductionNames[rng() % kNumReductions], rng() % 2 == 0);
      }
    }
    const auto t0 = Clock::now();
    absl::Status status;
    client::Value value;
    std::vector<double> reduced;
    if (ask_value) {
      auto v = t.GetValue(step, client::kGlobal, ws.worker_name);
      status = v.status();
      if (v.ok()) value = std::move(*v);
    } else {
      auto r = t.ReductionValues(step, reductions, client::kGlobal, ws.worker_name);
      status = r.status();
      if (r.ok()) reduced = std::move(*r);
    }
    counts->latencies.push_back(static_cast<float>(Since(t0)));
    ++counts->calls;
    if (!status.ok()) {
      const Reason reason = GetReason(status);
      // Past the complete steps: not complete yet, or not saved at that step,
      // or (early on) the 1 MiB tensor not saved by anyone yet.
      const bool fine =
          !complete &&
          (reason == Reason::kStepNotYetAvailable || reason == Reason::kTensorUnavailableForStep ||
           reason == Reason::kStepUnavailable || reason == Reason::kTensorUnavailable);
      if (fine) {
        ++counts->not_yet;
      } else {
        ++counts->errors;
        problems->Note(absl::StrCat("reader: ", Where(ws, step, tensor), " (",
                                    complete ? "complete" : "maybe incomplete",
                                    "): ", status.ToString()));
      }
      continue;
    }
    // An answer: the step must have been written, with this tensor.
    if (static_cast<int64_t>(step) > ws.started.load() || !ws.Present(step, tensor)) {
      ++counts->mismatches;
      problems->Note(absl::StrCat("reader: an answer for ", Where(ws, step, tensor),
                                  ", which was never written"));
      continue;
    }
    const std::string expected = Content(ws.trial, ws.worker, step, tensor);
    if (ask_value) {
      ++counts->value_checks;
      const bool same = value.step == step && value.worker == ws.worker_name &&
                        value.dtype == DTypeOf(spec) && value.shape == ShapeOf(spec) &&
                        value.data == expected;
      if (!same) {
        ++counts->mismatches;
        problems->Note(absl::StrCat("reader: GetValue of ", Where(ws, step, tensor),
                                    " differs (got step ", value.step, " worker ", value.worker,
                                    " dtype ", value.dtype, " ", value.data.size(), " bytes)"));
      }
      continue;
    }
    if (reduced.size() != reductions.size()) {
      ++counts->mismatches;
      problems->Note(absl::StrCat("reader: ", reduced.size(), " reductions for ", reductions.size(),
                                  " asked, ", Where(ws, step, tensor)));
      continue;
    }
    for (size_t i = 0; i < reductions.size(); ++i) {
      ++counts->reduction_checks;
      const double want =
          LocalReduction(expected, spec.bytes == 8, reductions[i].first, reductions[i].second);
      if (!CloseEnough(reduced[i], want)) {
        ++counts->mismatches;
        problems->Note(absl::StrFormat("reader: %s%s of %s = %.17g, computed %.17g",
                                       reductions[i].second ? "abs " : "", reductions[i].first,
                                       Where(ws, step, tensor), reduced[i], want));
      }
    }
  }
}

void WriterLoop(WriterState* ws, Clock::time_point start, double seconds, double bytes_per_second) {
  client::Writer* writer = ws->writer.get();
  auto last_flush = Clock::now();
  int since_flush = 0;
  absl::Status s;
  for (uint64_t step = 0; s.ok() && Since(start) < seconds; ++step) {
    ws->started.store(static_cast<int64_t>(step));
    for (int t = 0; t < kNumTensors && s.ok(); ++t) {
      if (!ws->Present(step, t)) continue;
      std::string data = Content(ws->trial, ws->worker, step, t);
      const size_t n = data.size();
      s = writer->Write(MakeRecord(t, step, std::move(data)));
      if (s.ok()) {
        ws->bytes += n;
        ++ws->records;
      }
    }
    if (s.ok()) s = writer->EndStep(step);
    if (!s.ok()) break;
    ws->ended = static_cast<int64_t>(step);
    if (++since_flush >= 8 || Since(last_flush) >= 1.0) {
      s = writer->Flush();
      if (!s.ok()) break;
      ws->acked.store(static_cast<int64_t>(step));
      ++ws->flushes;
      since_flush = 0;
      last_flush = Clock::now();
    }
    if (bytes_per_second > 0) {
      const double due = ws->bytes / bytes_per_second;
      const double ahead = std::min(due, seconds) - Since(start);
      if (ahead > 0) std::this_thread::sleep_for(std::chrono::duration<double>(ahead));
    }
  }
  absl::Status closed = writer->Close(/*end_of_training=*/s.ok());
  if (s.ok() && closed.ok()) {
    ws->acked.store(ws->ended);
  } else {
    ws->error = s.ok() ? closed : s;
  }
}

// ------------------------------------------------------------ verifier

struct VerifyCounts {
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t missing = 0;         // acknowledged, not read back
  uint64_t mismatched = 0;      // read back different (or truncated, or another worker's)
  uint64_t duplicates = 0;      // read back more than once
  uint64_t unexpected = 0;      // read back, never written
  uint64_t unacked_absent = 0;  // written after the last acknowledgement, not there: allowed
  uint64_t stream_errors = 0;
  uint64_t step_list_errors = 0;
};

// Streams every value of (writer, tensor) back and checks it against what was
// written.
void VerifyOne(Connection& connection, const WriterState& ws, int tensor, VerifyCounts* c,
               Problems* problems) {
  const TensorSpec& spec = kTensors[tensor];
  const int64_t acked = ws.acked.load();
  const int64_t last = std::max<int64_t>(ws.ended, ws.started.load());
  std::vector<uint32_t> seen(static_cast<size_t>(last + 1), 0);
  auto check = [&](const v1::TensorValue& header, const std::string& data) {
    ++c->records;
    c->bytes += data.size();
    const uint64_t step = header.step();
    if (header.worker() != ws.worker_name || static_cast<int64_t>(step) > last ||
        !ws.Present(step, tensor)) {
      ++c->unexpected;
      problems->Note(absl::StrCat("verify: read back ", spec.name, " of ", ws.trial_name,
                                  " worker ", header.worker(), " step ", step, " asking ",
                                  ws.worker_name, ": never written"));
      return;
    }
    if (seen[step]++ > 0) {
      ++c->duplicates;
      problems->Note(
          absl::StrCat("verify: ", Where(ws, step, tensor), " read back ", seen[step], " times"));
      return;
    }
    const bool same =
        data.size() == header.value_size() && header.dtype() == DTypeOf(spec) &&
        std::vector<int64_t>(header.shape().begin(), header.shape().end()) == ShapeOf(spec) &&
        data == Content(ws.trial, ws.worker, step, tensor);
    if (!same) {
      ++c->mismatched;
      problems->Note(absl::StrCat("verify: ", Where(ws, step, tensor), " differs (", data.size(),
                                  " of ", header.value_size(), " bytes)"));
    }
  };

  grpc::ClientContext context;
  v1::TensorValuesRequest request;
  request.set_trial(ws.trial_name);
  request.set_tensor(spec.name);
  request.set_mode(v1::GLOBAL);
  request.set_worker(ws.worker_name);
  auto reader = connection.stub()->GetValues(&context, request);
  v1::TensorValue msg;
  v1::TensorValue current;  // the header of a value arriving in pieces
  std::string data;
  bool have = false;
  google::protobuf::RepeatedPtrField<v1::TensorValue> batched;
  while (reader->Read(&msg)) {
    batched.Clear();
    batched.Swap(msg.mutable_batched());
    if (msg.header()) {
      if (have) check(current, data);
      data = std::move(*msg.mutable_data());
      current = std::move(msg);
      have = true;
    } else if (have) {
      data.append(msg.data());
    }
    // Complete values packed after this one.
    for (const v1::TensorValue& b : batched) {
      if (have) {
        check(current, data);
        have = false;
      }
      check(b, b.data());
    }
    msg.Clear();
  }
  if (have) check(current, data);
  const absl::Status status = FromGrpc(reader->Finish(), &context, connection.address());
  if (!status.ok()) {
    ++c->stream_errors;
    problems->Note(absl::StrCat("verify: GetValues of ", spec.name, " of ", ws.trial_name, " ",
                                ws.worker_name, ": ", status.ToString()));
  }
  for (int64_t step = 0; step <= last; ++step) {
    if (!ws.Present(step, tensor) || seen[step] > 0) continue;
    if (step <= acked) {
      ++c->missing;
      problems->Note(
          absl::StrCat("verify: ", Where(ws, step, tensor), " acknowledged but missing"));
    } else {
      ++c->unacked_absent;
    }
  }
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) total += it->file_size(ec2);
  }
  return total;
}

}  // namespace

absl::StatusOr<std::vector<Result>> RunSoak(const SoakOptions& o) {
  TK_ASSIGN_OR_RETURN(ServerProcess started, SpawnServer(o.server_binary, o.data_dir));
  std::unique_ptr<Subprocess> server = std::move(started.process);
  const std::string address = started.address;
  const Rss idle = ReadRss(server->pid());
  const int per_trial = std::max(1, o.workers_per_trial);
  const int num_trials = (o.writers + per_trial - 1) / per_trial;
  std::fprintf(stderr,
               "  [soak: %d writers in %d trials, %d readers, %.0f s, cap %.0f MB/s, "
               "tensorkeep-server pid %d]\n",
               o.writers, num_trials, o.readers, o.seconds, o.max_mbps, server->pid());

  // The writers, opened before the clock starts.
  std::vector<std::unique_ptr<WriterState>> states;
  std::vector<WriterState*> writers;
  std::vector<std::vector<WriterState*>> trials(num_trials);
  for (int g = 0; g < o.writers; ++g) {
    auto ws = std::make_unique<WriterState>();
    ws->trial = g / per_trial;
    ws->worker = g % per_trial;
    ws->global = g;
    ws->trial_name = absl::StrCat("soak-", ws->trial);
    ws->worker_name = absl::StrCat("worker_", ws->worker);
    client::WriterOptions wo;
    wo.server = address;
    wo.trial = ws->trial_name;
    wo.worker = ws->worker_name;
    wo.num_workers = static_cast<uint32_t>(std::min(per_trial, o.writers - ws->trial * per_trial));
    TK_ASSIGN_OR_RETURN(ws->writer, client::Writer::Open(wo, 30));
    writers.push_back(ws.get());
    trials[ws->trial].push_back(ws.get());
    states.push_back(std::move(ws));
  }

  // RSS: sampled every 250 ms until the end of the verification.
  std::atomic<bool> sampling_done{false};
  std::mutex rss_mu;
  std::vector<std::pair<double, uint64_t>> rss_samples;  // (seconds, VmRSS)
  const auto start = Clock::now();
  std::thread sampler([&] {
    while (!sampling_done.load()) {
      const Rss now = ReadRss(server->pid());
      {
        std::lock_guard<std::mutex> lock(rss_mu);
        rss_samples.emplace_back(Since(start), now.rss);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });

  const double per_writer_rate = o.max_mbps > 0 ? o.max_mbps * 1e6 / o.writers : 0;
  std::vector<std::thread> writer_threads;
  for (WriterState* ws : writers) {
    writer_threads.emplace_back(
        [ws, start, &o, per_writer_rate] { WriterLoop(ws, start, o.seconds, per_writer_rate); });
  }
  std::atomic<bool> stop_readers{false};
  std::vector<ReaderCounts> reader_counts(o.readers);
  Problems problems;
  std::vector<std::thread> reader_threads;
  for (int r = 0; r < o.readers; ++r) {
    reader_threads.emplace_back(
        [&, r] { ReaderLoop(address, r, trials, stop_readers, &reader_counts[r], &problems); });
  }
  // Progress, once a minute (or every 10 % of a short run).
  const double progress_every = std::min(60.0, std::max(1.0, o.seconds / 10));
  std::thread progress([&] {
    double next = progress_every;
    while (!stop_readers.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (Since(start) < next) continue;
      next += progress_every;
      int64_t steps = 0;
      for (const WriterState* ws : writers) steps += ws->acked.load() + 1;
      const Rss now = ReadRss(server->pid());
      std::fprintf(stderr, "  [soak %4.0f s: %lld steps flushed, server RSS %.0f MiB]\n",
                   Since(start), static_cast<long long>(steps), now.rss / 1048576.0);
    }
  });
  for (auto& t : writer_threads) t.join();
  const double write_seconds = Since(start);
  stop_readers = true;
  for (auto& t : reader_threads) t.join();
  progress.join();
  const double read_seconds = Since(start);
  const Rss after_writing = ReadRss(server->pid());

  Throughput ingest;
  ingest.seconds = write_seconds;
  int failed_writers = 0;
  uint64_t steps_written = 0;
  for (const WriterState* ws : writers) {
    ingest.bytes += ws->bytes;
    ingest.records += ws->records;
    steps_written += static_cast<uint64_t>(ws->ended + 1);
    if (!ws->error.ok()) {
      ++failed_writers;
      problems.Note(absl::StrCat("writer ", ws->trial_name, " ", ws->worker_name,
                                 " failed after step ", ws->ended, " (acked through ",
                                 ws->acked.load(), "): ", ws->error.ToString()));
    }
  }
  std::fprintf(stderr, "  [soak: writers done in %.1f s; verifying]\n", write_seconds);

  // The verifier: every (writer, tensor), by a few threads.
  const auto verify_start = Clock::now();
  VerifyCounts verify;
  std::mutex verify_mu;
  std::atomic<size_t> next{0};
  const size_t jobs = writers.size() * kNumTensors;
  std::vector<std::thread> verifiers;
  auto verify_connection = Connection::Open(address);
  TK_RETURN_IF_ERROR(verify_connection.status());
  for (int v = 0; v < 3; ++v) {
    verifiers.emplace_back([&] {
      VerifyCounts mine;
      for (size_t j = next++; j < jobs; j = next++) {
        VerifyOne(**verify_connection, *writers[j / kNumTensors], static_cast<int>(j % kNumTensors),
                  &mine, &problems);
      }
      std::lock_guard<std::mutex> lock(verify_mu);
      verify.records += mine.records;
      verify.bytes += mine.bytes;
      verify.missing += mine.missing;
      verify.mismatched += mine.mismatched;
      verify.duplicates += mine.duplicates;
      verify.unexpected += mine.unexpected;
      verify.unacked_absent += mine.unacked_absent;
      verify.stream_errors += mine.stream_errors;
    });
  }
  for (auto& t : verifiers) t.join();
  // Each trial's step list: exactly the steps its workers ended, all complete.
  for (const auto& trial : trials) {
    int64_t last = -1;
    for (const WriterState* ws : trial) last = std::max(last, ws->ended);
    client::Trial t(*verify_connection, trial[0]->trial_name);
    auto steps = t.Steps();
    std::vector<uint64_t> want;
    for (int64_t s = 0; s <= last; ++s) want.push_back(static_cast<uint64_t>(s));
    if (!steps.ok() || *steps != want) {
      ++verify.step_list_errors;
      problems.Note(absl::StrCat(
          "verify: steps of ", trial[0]->trial_name, ": ",
          steps.ok() ? absl::StrCat(steps->size(), " steps, first ",
                                    steps->empty() ? -1 : (int64_t)steps->front(), " last ",
                                    steps->empty() ? -1 : (int64_t)steps->back())
                     : steps.status().ToString(),
          "; expected 0..", last));
    }
  }
  const double verify_seconds = Since(verify_start);

  sampling_done = true;
  sampler.join();
  const uint64_t stored = DirBytes(o.data_dir);
  const Rss end = ReadRss(server->pid());
  server->Signal(SIGTERM);
  const int exit_code = server->Wait(120);
  {
    std::error_code ec;
    fs::remove_all(o.data_dir, ec);
  }

  // ---- results
  const double mib = 1024.0 * 1024.0;
  std::vector<Result> out;
  {
    Result r;
    r.name = "soak/ingest";
    r.value = ingest.MBps();
    r.unit = "MB/s";
    r.figure_text =
        absl::StrFormat("%.1f MB/s %.0f rec/s, %d writers, %.0f s, %.2f GB", r.value,
                        ingest.PerSecond(), o.writers, write_seconds, ingest.bytes / 1e9);
    r.extra = {{"records_per_s", ingest.PerSecond()},
               {"seconds", write_seconds},
               {"bytes", static_cast<double>(ingest.bytes)},
               {"records", static_cast<double>(ingest.records)},
               {"steps", static_cast<double>(steps_written)},
               {"writers", static_cast<double>(o.writers)},
               {"trials", static_cast<double>(num_trials)},
               {"cap_MBps", o.max_mbps},
               {"failed_writers", static_cast<double>(failed_writers)},
               {"stored_GB", stored / 1e9}};
    r.target = "no writer failing";
    r.Judge(failed_writers == 0);
    out.push_back(std::move(r));
  }
  ReaderCounts all;
  for (const ReaderCounts& c : reader_counts) {
    all.value_checks += c.value_checks;
    all.reduction_checks += c.reduction_checks;
    all.calls += c.calls;
    all.mismatches += c.mismatches;
    all.not_yet += c.not_yet;
    all.errors += c.errors;
    all.latencies.insert(all.latencies.end(), c.latencies.begin(), c.latencies.end());
  }
  {
    Result r;
    r.name = "soak/read";
    r.value = (all.value_checks + all.reduction_checks) / read_seconds;
    r.unit = "checks/s";
    r.figure_text = absl::StrFormat(
        "%.0f checks/s (%.0f calls/s, p50 %.2f ms p99 %.2f ms): %llu values + %llu reductions "
        "checked, %llu mismatched, %llu errors, %llu not yet complete",
        r.value, all.calls / read_seconds, Percentile(all.latencies, 0.5) * 1e3,
        Percentile(all.latencies, 0.99) * 1e3, static_cast<unsigned long long>(all.value_checks),
        static_cast<unsigned long long>(all.reduction_checks),
        static_cast<unsigned long long>(all.mismatches),
        static_cast<unsigned long long>(all.errors), static_cast<unsigned long long>(all.not_yet));
    r.extra = {{"readers", static_cast<double>(o.readers)},
               {"calls", static_cast<double>(all.calls)},
               {"value_checks", static_cast<double>(all.value_checks)},
               {"reduction_checks", static_cast<double>(all.reduction_checks)},
               {"calls_per_s", all.calls / read_seconds},
               {"mismatched", static_cast<double>(all.mismatches)},
               {"errors", static_cast<double>(all.errors)},
               {"not_yet_available", static_cast<double>(all.not_yet)},
               {"p50_ms", Percentile(all.latencies, 0.5) * 1e3},
               {"p99_ms", Percentile(all.latencies, 0.99) * 1e3}};
    r.target = "every answer right, every complete step answered";
    r.Judge(all.mismatches == 0 && all.errors == 0 && (o.readers == 0 || all.calls > 0));
    out.push_back(std::move(r));
  }
  {
    // RSS over the run: a leak shows as growth from the first tenth to the last.
    auto at = [&](double fraction) {
      const double t = write_seconds * fraction;
      uint64_t v = 0;
      for (const auto& [s, rss] : rss_samples) {
        if (s <= t) v = rss;
      }
      return v / mib;
    };
    uint64_t max_rss = 0;
    for (const auto& [s, rss] : rss_samples) {
      if (s <= write_seconds) max_rss = std::max(max_rss, rss);
    }
    Result r;
    r.name = "soak/rss";
    r.value = end.hwm / mib;
    r.unit = "MiB";
    r.figure_text = absl::StrFormat(
        "peak RSS %.0f MiB (writing: max %.0f, at 10/50/90 %% %.0f/%.0f/%.0f, after %.0f)", r.value,
        max_rss / mib, at(0.1), at(0.5), at(0.9), after_writing.rss / mib);
    r.baseline_name = "idle server";
    r.baseline = idle.rss / mib;
    r.baseline_text = absl::StrFormat("RSS %.0f MiB", r.baseline);
    r.extra = {{"peak_rss_MiB", end.hwm / mib},
               {"peak_rss_after_writing_MiB", after_writing.hwm / mib},
               {"max_rss_writing_MiB", max_rss / mib},
               {"rss_10pct_MiB", at(0.1)},
               {"rss_50pct_MiB", at(0.5)},
               {"rss_90pct_MiB", at(0.9)},
               {"rss_end_MiB", end.rss / mib},
               {"idle_rss_MiB", idle.rss / mib}};
    out.push_back(std::move(r));
  }
  {
    Result r;
    r.name = "soak/verify";
    r.value = static_cast<double>(verify.records);
    r.unit = "records";
    r.figure_text = absl::StrFormat(
        "%llu records read back (%.2f GB, %.1f s): %llu missing, %llu mismatched, "
        "%llu duplicate, %llu never written, %llu step lists wrong, %llu streams failed, "
        "server exit %d",
        static_cast<unsigned long long>(verify.records), verify.bytes / 1e9, verify_seconds,
        static_cast<unsigned long long>(verify.missing),
        static_cast<unsigned long long>(verify.mismatched),
        static_cast<unsigned long long>(verify.duplicates),
        static_cast<unsigned long long>(verify.unexpected),
        static_cast<unsigned long long>(verify.step_list_errors),
        static_cast<unsigned long long>(verify.stream_errors), exit_code);
    r.extra = {{"records", static_cast<double>(verify.records)},
               {"records_written", static_cast<double>(ingest.records)},
               {"bytes", static_cast<double>(verify.bytes)},
               {"seconds", verify_seconds},
               {"MBps", verify.bytes / verify_seconds / 1e6},
               {"missing", static_cast<double>(verify.missing)},
               {"mismatched", static_cast<double>(verify.mismatched)},
               {"duplicates", static_cast<double>(verify.duplicates)},
               {"never_written", static_cast<double>(verify.unexpected)},
               {"unacknowledged_absent", static_cast<double>(verify.unacked_absent)},
               {"step_list_errors", static_cast<double>(verify.step_list_errors)},
               {"stream_errors", static_cast<double>(verify.stream_errors)},
               {"server_exit", static_cast<double>(exit_code)}};
    r.target = "0 missing, mismatched, duplicate, exit 0";
    r.Judge(verify.missing == 0 && verify.mismatched == 0 && verify.duplicates == 0 &&
            verify.unexpected == 0 && verify.step_list_errors == 0 && verify.stream_errors == 0 &&
            exit_code == 0 && verify.records > 0);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace bench
}  // namespace tensorkeep
