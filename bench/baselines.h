// The same-run baselines of tensorkeep-bench: what LevelDB, gRPC and a plain
// C++ loop do with the same records, bytes and tensors when tensorkeep is not
// in the way.
//
//  - RawLevelDbIngest: the ingest records written straight into a LevelDB
//    opened with the options of LevelDbTensorStore (64 MiB write buffer, no
//    compression, sync off), from as many threads as there are writers, one
//    WriteBatch per writer-step, value keys step-major as storage/keys.h
//    builds them.
//  - SinkServer / RawGrpc*: a bench-only service (bench/bench_sink.proto) on
//    127.0.0.1:0 that discards what it reads and sends bytes from a buffer
//    made once; clients call it like tensorkeep's client calls the collector.
//  - PlainLoop*: in bench/plain_loops.h (shared with tensor_benchmark).
//
// Thread safety: the free functions are thread-safe; SinkServer's methods are
// too. Every loop here is bounded by its arguments.
#ifndef TENSORKEEP_BENCH_BASELINES_H_
#define TENSORKEEP_BENCH_BASELINES_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "bench/plain_loops.h"
#include "grpcpp/grpcpp.h"

namespace tensorkeep {
namespace bench {

// Releases N threads at once: each calls Arrive(), the timing thread calls
// Open() once, which returns when all N arrived (so thread start-up and
// connection set-up stay out of the measured time).
class StartGate {
 public:
  explicit StartGate(int n) : waiting_(n) {}
  // Blocks until Open().
  void Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--waiting_ == 0) cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  // Waits until every thread arrived, then releases them.
  void Open() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ <= 0; });
    open_ = true;
    cv_.notify_all();
  }
  // Open(), then joins `threads`: the seconds from the release until the
  // last one ended (the measured time of every multi-threaded benchmark).
  double OpenAndTime(std::vector<std::thread>& threads) {
    Open();
    const auto start = std::chrono::steady_clock::now();
    for (auto& t : threads) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_;
  bool open_ = false;
};

// Work done in some time.
struct Throughput {
  double seconds = 0;
  uint64_t bytes = 0;    // payload bytes (tensor values for ingest)
  uint64_t records = 0;  // records or messages

  // 1 MB = 10^6 bytes.
  double MBps() const { return seconds > 0 ? bytes / seconds / 1e6 : 0; }
  double PerSecond() const { return seconds > 0 ? records / seconds : 0; }
};

// The records of one ingest run, shared by tensorkeep and its baselines:
// `writers` workers, each writing `steps` steps of `tensors_per_step` tensors
// of `value_bytes` bytes (float32 values; 8-byte values are float64 scalars).
struct IngestShape {
  size_t value_bytes = 0;
  int writers = 1;
  uint64_t steps = 1;
  int tensors_per_step = 1;

  uint64_t records() const { return uint64_t(writers) * steps * tensors_per_step; }
  uint64_t bytes() const { return records() * value_bytes; }
  static std::string TensorName(int t);  // "layer_007/weight"
  static std::string WorkerName(int w);  // "worker_7"
};

// `bytes` bytes of float32 values uniform in [-1, 1) (incompressible, like
// real weights), the same for the same seed.
std::string RandomFloatBytes(size_t bytes, uint32_t seed);

// Writes the records of `shape` (values: `value`, whose size is
// shape.value_bytes) into a new LevelDB at `dir` (which must not exist) and
// returns the time from the first write until every writer's last batch
// returned. The database is closed (not deleted) before returning.
absl::StatusOr<Throughput> RawLevelDbIngest(const std::string& dir, const IngestShape& shape,
                                            const std::string& value);

// A running BenchSink server on 127.0.0.1 (a free port).
class SinkServer {
 public:
  static absl::StatusOr<std::unique_ptr<SinkServer>> Start();
  ~SinkServer();

  // "127.0.0.1:PORT".
  const std::string& address() const { return address_; }

 private:
  class Service;
  SinkServer();
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// A channel made as client::Connection makes its channels (same arguments, so
// channels to one address share connections the same way).
std::shared_ptr<grpc::Channel> BenchChannel(const std::string& address);

// `streams` concurrent Sink streams (one thread and channel each), each
// sending `messages_per_stream` messages of `message_bytes` bytes. The time
// runs until every stream's summary arrived (the server read everything).
absl::StatusOr<Throughput> RawGrpcIngest(const std::string& address, int streams,
                                         uint64_t messages_per_stream, size_t message_bytes);

// Latencies in seconds of `iterations` Source calls streaming one message of
// `message_bytes` (the shape of a GetValue call), on one channel.
absl::StatusOr<std::vector<double>> RawGrpcFetchLatencies(const std::string& address,
                                                          size_t message_bytes, int iterations);

// Latencies in seconds of `iterations` unary Fetch calls answering
// `response_bytes` bytes (the shape of a listing call).
absl::StatusOr<std::vector<double>> RawGrpcUnaryLatencies(const std::string& address,
                                                          size_t response_bytes, int iterations);

// One Source call streaming `count` messages of `message_bytes`, timed from the
// call until the last message was read.
absl::StatusOr<Throughput> RawGrpcStream(const std::string& address, size_t message_bytes,
                                         uint64_t count);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_BASELINES_H_
