#include "bench/baselines.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_sink.grpc.pb.h"
#include "leveldb/cache.h"
#include "leveldb/db.h"
#include "leveldb/filter_policy.h"
#include "leveldb/write_batch.h"
#include "storage/keys.h"

namespace tensorkeep {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

std::string IngestShape::TensorName(int t) { return absl::StrFormat("layer_%03d/weight", t); }
std::string IngestShape::WorkerName(int w) { return absl::StrCat("worker_", w); }

std::string RandomFloatBytes(size_t bytes, uint32_t seed) {
  std::string out(bytes, '\0');
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t n = bytes / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    const float f = dist(rng);
    std::memcpy(&out[i * sizeof(float)], &f, sizeof(float));
  }
  for (size_t i = n * sizeof(float); i < bytes; ++i) out[i] = static_cast<char>(rng());
  return out;
}

// ------------------------------------------------------------------ LevelDB

absl::StatusOr<Throughput> RawLevelDbIngest(const std::string& dir, const IngestShape& shape,
                                            const std::string& value) {
  // The options of LevelDbTensorStore::Open (storage/leveldb_tensor_store.cc).
  std::unique_ptr<leveldb::Cache> cache(leveldb::NewLRUCache(64 << 20));
  std::unique_ptr<const leveldb::FilterPolicy> filter(leveldb::NewBloomFilterPolicy(10));
  leveldb::Options options;
  options.create_if_missing = true;
  options.error_if_exists = true;
  options.write_buffer_size = 64 << 20;
  options.max_file_size = 64 << 20;
  options.block_cache = cache.get();
  options.filter_policy = filter.get();
  options.compression = leveldb::kNoCompression;
  leveldb::DB* raw = nullptr;
  leveldb::Status s = leveldb::DB::Open(options, dir, &raw);
  if (!s.ok()) return absl::InternalError(absl::StrCat("raw LevelDB at ", dir, ": ", s.ToString()));
  std::unique_ptr<leveldb::DB> db(raw);

  std::vector<std::string> names;
  for (int t = 0; t < shape.tensors_per_step; ++t) names.push_back(IngestShape::TensorName(t));
  StartGate gate(shape.writers);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < shape.writers; ++w) {
    threads.emplace_back([&, w] {
      const std::string worker = IngestShape::WorkerName(w);
      leveldb::WriteBatch batch;
      gate.Arrive();
      for (uint64_t step = 0; step < shape.steps && !failed.load(); ++step) {
        batch.Clear();
        for (const std::string& name : names) {
          batch.Put(ValueKey("bench", step, worker, step, name), value);
        }
        if (!db->Write(leveldb::WriteOptions(), &batch).ok()) failed = true;
      }
    });
  }
  Throughput out;
  out.seconds = gate.OpenAndTime(threads);
  out.bytes = shape.bytes();
  out.records = shape.records();
  if (failed) return absl::InternalError("raw LevelDB write failed");
  return out;
}

// ------------------------------------------------------------------ gRPC sink

namespace {

class SinkReader : public grpc::ServerReadReactor<Blob> {
 public:
  explicit SinkReader(SinkSummary* summary) : summary_(summary) { StartRead(&blob_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    summary_->set_messages(summary_->messages() + 1);
    summary_->set_bytes(summary_->bytes() + blob_.data().size());
    blob_.Clear();
    StartRead(&blob_);
  }
  void OnDone() override { delete this; }

 private:
  SinkSummary* const summary_;
  Blob blob_;
};

class SourceWriter : public grpc::ServerWriteReactor<Blob> {
 public:
  SourceWriter(std::shared_ptr<const std::string> data, uint64_t count) : left_(count) {
    blob_.set_data(*data);
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  // The last message goes with the status in one operation, as tensorkeep's
  // value streams do: the baseline is the best raw gRPC does.
  void Next() {
    if (left_ == 0) {
      Finish(grpc::Status::OK);
      return;
    }
    if (--left_ == 0) {
      StartWriteAndFinish(&blob_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      StartWrite(&blob_);
    }
  }
  Blob blob_;
  uint64_t left_;
};

constexpr size_t kMaxBlob = 64u << 20;

}  // namespace

class SinkServer::Service final : public BenchSink::CallbackService {
 public:
  grpc::ServerReadReactor<Blob>* Sink(grpc::CallbackServerContext*,
                                      SinkSummary* summary) override {
    return new SinkReader(summary);
  }
  grpc::ServerWriteReactor<Blob>* Source(grpc::CallbackServerContext*,
                                         const SourceRequest* request) override {
    return new SourceWriter(Bytes(request->message_bytes()), request->count());
  }
  grpc::ServerUnaryReactor* Fetch(grpc::CallbackServerContext* context,
                                  const SourceRequest* request, Blob* response) override {
    response->set_data(*Bytes(request->message_bytes()));
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  // A buffer of `n` bytes, made once per size.
  std::shared_ptr<const std::string> Bytes(uint64_t n) {
    n = std::min<uint64_t>(n, kMaxBlob);
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = buffers_[n];
    if (slot == nullptr) slot = std::make_shared<std::string>(RandomFloatBytes(n, 7));
    return slot;
  }
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<const std::string>> buffers_;
};

SinkServer::SinkServer() = default;

SinkServer::~SinkServer() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
}

absl::StatusOr<std::unique_ptr<SinkServer>> SinkServer::Start() {
  std::unique_ptr<SinkServer> s(new SinkServer());
  s->service_ = std::make_unique<Service>();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(s->service_.get());
  // As tensorkeep-server (server/collector_server.h).
  builder.SetMaxReceiveMessageSize(512 << 20);
  builder.SetMaxSendMessageSize(512 << 20);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || port == 0) {
    return absl::UnavailableError("cannot start the bench sink on 127.0.0.1:0");
  }
  s->address_ = absl::StrCat("127.0.0.1:", port);
  return s;
}

std::shared_ptr<grpc::Channel> BenchChannel(const std::string& address) {
  grpc::ChannelArguments args;  // as client/connection.cc
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

namespace {

// Untimed calls before the timed ones, as the tensorkeep side has (connection
// set-up, first-call allocations).
constexpr int kWarmUpCalls = 3;

std::unique_ptr<BenchSink::Stub> ConnectedStub(const std::string& address) {
  auto channel = BenchChannel(address);
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return BenchSink::NewStub(channel);
}

}  // namespace

absl::StatusOr<Throughput> RawGrpcIngest(const std::string& address, int streams,
                                         uint64_t messages_per_stream, size_t message_bytes) {
  const std::string payload = RandomFloatBytes(message_bytes, 3);
  StartGate gate(streams);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < streams; ++i) {
    threads.emplace_back([&] {
      auto channel = BenchChannel(address);
      auto stub = BenchSink::NewStub(channel);
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
      grpc::ClientContext context;
      SinkSummary summary;
      auto writer = stub->Sink(&context, &summary);
      Blob blob;
      gate.Arrive();
      for (uint64_t m = 0; m < messages_per_stream; ++m) {
        // A fresh copy per message, as the writer's records are fresh.
        blob.set_data(payload);
        if (!writer->Write(blob)) break;
      }
      writer->WritesDone();
      grpc::Status s = writer->Finish();
      if (!s.ok() || summary.messages() != messages_per_stream) failed = true;
    });
  }
  Throughput out;
  out.seconds = gate.OpenAndTime(threads);
  out.records = uint64_t(streams) * messages_per_stream;
  out.bytes = out.records * message_bytes;
  if (failed) return absl::InternalError("raw gRPC Sink stream failed");
  return out;
}

absl::StatusOr<std::vector<double>> RawGrpcFetchLatencies(const std::string& address,
                                                          size_t message_bytes, int iterations) {
  auto stub = ConnectedStub(address);
  SourceRequest request;
  request.set_message_bytes(message_bytes);
  request.set_count(1);
  std::vector<double> out;
  Blob blob;
  for (int i = -kWarmUpCalls; i < iterations; ++i) {
    const auto start = Clock::now();
    grpc::ClientContext context;
    auto reader = stub->Source(&context, request);
    size_t got = 0;
    while (reader->Read(&blob)) got += blob.data().size();
    grpc::Status s = reader->Finish();
    if (!s.ok() || got != message_bytes) return absl::InternalError("raw gRPC Source failed");
    if (i >= 0) out.push_back(Since(start));
  }
  return out;
}

absl::StatusOr<std::vector<double>> RawGrpcUnaryLatencies(const std::string& address,
                                                          size_t response_bytes, int iterations) {
  auto stub = ConnectedStub(address);
  SourceRequest request;
  request.set_message_bytes(response_bytes);
  std::vector<double> out;
  for (int i = -kWarmUpCalls; i < iterations; ++i) {
    const auto start = Clock::now();
    grpc::ClientContext context;
    Blob blob;
    grpc::Status s = stub->Fetch(&context, request, &blob);
    if (!s.ok() || blob.data().size() != response_bytes) {
      return absl::InternalError("raw gRPC Fetch failed");
    }
    if (i >= 0) out.push_back(Since(start));
  }
  return out;
}

absl::StatusOr<Throughput> RawGrpcStream(const std::string& address, size_t message_bytes,
                                         uint64_t count) {
  auto stub = ConnectedStub(address);
  SourceRequest request;
  request.set_message_bytes(message_bytes);
  request.set_count(count);
  const auto start = Clock::now();
  grpc::ClientContext context;
  auto reader = stub->Source(&context, request);
  Blob blob;
  Throughput out;
  while (reader->Read(&blob)) {
    out.bytes += blob.data().size();
    ++out.records;
  }
  grpc::Status s = reader->Finish();
  out.seconds = Since(start);
  if (!s.ok() || out.records != count) return absl::InternalError("raw gRPC Source failed");
  return out;
}

}  // namespace bench
}  // namespace tensorkeep
