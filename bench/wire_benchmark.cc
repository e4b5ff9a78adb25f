// Micro-benchmarks of the per-record work on the ingest path: key encoding
// (storage/keys.h), record blocks (storage/record_block.h) and record framing (a RecordBatch of the Push stream,
// serialized by the writer and parsed by the collector).
//
// Baselines in the same run: BM_KeyBaseline_* builds a string of the same
// length by plain appends (what any encoding must at least cost), and
// BM_FramingBaseline_* copies the same bytes with memcpy (what moving them
// costs without framing). Compare bytes_per_second / items_per_second:
//   wire_benchmark --benchmark_filter='Key'
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "google/protobuf/arena.h"
#include "proto/tensorkeep.pb.h"
#include "storage/keys.h"
#include "storage/record_block.h"

namespace tensorkeep {
namespace {

const std::string kTrial = "resnet50-run-0042";
const std::string kWorker = "worker_3";
const std::string kName = "ResNet_layer4.2.conv3.weight";

void BM_ValueKey(benchmark::State& state) {
  uint64_t step = 0;
  for (auto _ : state) {
    std::string key = ValueKey(kTrial, step, kWorker, step, kName);
    ++step;
    benchmark::DoNotOptimize(key);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ValueKey);

void BM_BlockKey(benchmark::State& state) {
  uint64_t step = 0;
  for (auto _ : state) {
    std::string key = BlockKey(kTrial, step, kWorker, step);
    ++step;
    benchmark::DoNotOptimize(key);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BlockKey);

// A record block of `range(0)` scalar records: building it, and finding one
// record in it (what reading one small value costs beyond LevelDB's Get).
std::vector<std::string> ScalarNames(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back("layer" + std::to_string(1000 + i) + "/loss");
  return names;
}

void BM_RecordBlockBuild(benchmark::State& state) {
  const auto names = ScalarNames(static_cast<int>(state.range(0)));
  const std::string meta(12, '\x01'), data(8, '\x02');
  for (auto _ : state) {
    RecordBlockBuilder b;
    for (const auto& name : names) b.Add(name, meta, data);
    std::string block = b.Finish();
    benchmark::DoNotOptimize(block);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_RecordBlockBuild)->Arg(100);

void BM_RecordBlockFind(benchmark::State& state) {
  const auto names = ScalarNames(static_cast<int>(state.range(0)));
  RecordBlockBuilder b;
  for (const auto& name : names) b.Add(name, std::string(12, '\x01'), std::string(8, '\x02'));
  const std::string bytes = b.Finish();
  size_t i = 0;
  for (auto _ : state) {
    auto block = RecordBlock::Parse(bytes);
    auto entry = block->Find(names[i++ % names.size()]);
    benchmark::DoNotOptimize(entry);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordBlockFind)->Arg(100);

// Baseline: a string of the same length by plain appends.
void BM_KeyBaseline_Append(benchmark::State& state) {
  uint64_t step = 0;
  for (auto _ : state) {
    std::string key;
    key.reserve(64);
    key += '\x05';
    key += kTrial;
    key.append(reinterpret_cast<const char*>(&step), 8);
    key += kWorker;
    key.append(reinterpret_cast<const char*>(&step), 8);
    key += kName;
    key.append(6, '\0');
    ++step;
    benchmark::DoNotOptimize(key);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KeyBaseline_Append);

void BM_KeyRead(benchmark::State& state) {
  const std::string key = ValueKey(kTrial, 123456, kWorker, 654321, kName);
  for (auto _ : state) {
    KeyReader r(key);
    KeyFamily family;
    std::string_view trial, worker, name;
    uint64_t step = 0, block_id = 0;
    bool ok = r.Family(&family) && r.Str(&trial) && r.U64(&step) && r.Str(&worker) &&
              r.U64(&block_id) && r.Str(&name) && r.AtEnd();
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(step);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KeyRead);

// A PushRequest of `n` records of `value_bytes` each, as the writer packs them.
v1::PushRequest MakeBatch(int n, size_t value_bytes) {
  std::string value(value_bytes, '\0');
  std::mt19937 rng(1);
  for (char& c : value) c = static_cast<char>(rng());
  v1::PushRequest request;
  request.set_seq(7);
  for (int i = 0; i < n; ++i) {
    v1::TensorRecord* r = request.mutable_records()->add_records();
    r->set_name(kName + std::to_string(i));
    r->set_step(1000);
    r->set_mode(v1::TRAIN);
    r->set_mode_step(900);
    r->set_dtype(value_bytes == 8 ? v1::FLOAT64 : v1::FLOAT32);
    if (value_bytes != 8) r->add_shape(static_cast<int64_t>(value_bytes / 4));
    r->set_has_value(true);
    r->set_value_size(value_bytes);
    r->set_data(value);
    r->add_collections("weights");
  }
  return request;
}

// Args: records per message, value bytes.
void BM_FramingSerialize(benchmark::State& state) {
  const v1::PushRequest request = MakeBatch(state.range(0), state.range(1));
  std::string out;
  for (auto _ : state) {
    out.clear();
    request.SerializeToString(&out);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * request.ByteSizeLong());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_FramingSerialize)->Args({10000, 8})->Args({16, 64 << 10})->Args({1, 1 << 20});

void BM_FramingParse(benchmark::State& state) {
  const std::string wire = MakeBatch(state.range(0), state.range(1)).SerializeAsString();
  v1::PushRequest request;
  for (auto _ : state) {
    request.ParseFromString(wire);
    benchmark::DoNotOptimize(request);
  }
  state.SetBytesProcessed(state.iterations() * wire.size());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_FramingParse)->Args({10000, 8})->Args({16, 64 << 10})->Args({1, 1 << 20});

// The same parse into a message on a protobuf Arena reset per message: what
// per-record allocation costs the collector's parse (kept for comparison).
void BM_FramingParseArena(benchmark::State& state) {
  const std::string wire = MakeBatch(state.range(0), state.range(1)).SerializeAsString();
  for (auto _ : state) {
    google::protobuf::Arena arena;
    auto* request = google::protobuf::Arena::CreateMessage<v1::PushRequest>(&arena);
    request->ParseFromString(wire);
    benchmark::DoNotOptimize(request);
  }
  state.SetBytesProcessed(state.iterations() * wire.size());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_FramingParseArena)->Args({10000, 8})->Args({16, 64 << 10})->Args({1, 1 << 20});

// Baseline: copying the same bytes.
void BM_FramingBaseline_Memcpy(benchmark::State& state) {
  const std::string wire = MakeBatch(state.range(0), state.range(1)).SerializeAsString();
  std::string out(wire.size(), '\0');
  for (auto _ : state) {
    std::memcpy(out.data(), wire.data(), wire.size());
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * wire.size());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_FramingBaseline_Memcpy)->Args({10000, 8})->Args({16, 64 << 10})->Args({1, 1 << 20});

}  // namespace
}  // namespace tensorkeep

BENCHMARK_MAIN();
