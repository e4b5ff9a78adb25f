// Fuzzes the Push stream's core as a client drives it: a sequence of
// PushRequest messages through WriteSession::Handle of a Collector on a
// LevelDbTensorStore in memory (leveldb's MemEnv), with no gRPC in between.
//
// The input is the stream: messages back to back, each a 2-byte little-endian
// length and that many bytes of a serialized PushRequest (push_stream.h). The
// stream ends at the first message that does not parse or that Handle
// rejects, as the service would end it.
//
// Checked besides "no crash, no sanitizer report, no allocation over the
// fuzzer's -malloc_limit_mb": every write Handle hands out is stored or
// refused by the committer as a conflict (the in-memory store never fails);
// and the collector restarts on what was stored
// (Recover re-reads every block, key and metadata a client could make it write).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "google/protobuf/stubs/logging.h"
#include "leveldb/env.h"
#include "leveldb/helpers/memenv.h"
#include "proto/tensorkeep.pb.h"
#include "server/collector.h"
#include "server/write_session.h"
#include "spdlog/spdlog.h"
#include "storage/leveldb_tensor_store.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/push_stream.h"

namespace tensorkeep {
namespace {

std::unique_ptr<LevelDbTensorStore> OpenStore(leveldb::Env* env) {
  LevelDbOptions o;
  o.path = "/db";
  o.env = env;
  o.write_buffer_size = 1 << 20;
  o.block_cache_bytes = 1 << 20;
  auto store = LevelDbTensorStore::Open(o);
  TK_FUZZ_CHECK(store.ok());
  return std::move(*store);
}

std::unique_ptr<Collector> NewCollector(TensorStore* store) {
  CollectorOptions o;
  o.value_cache_bytes = 0;
  auto collector = Collector::Create(o, store);
  TK_FUZZ_CHECK(collector.ok());
  return std::move(*collector);
}

void Push(std::string_view stream) {
  std::unique_ptr<leveldb::Env> env(leveldb::NewMemEnv(leveldb::Env::Default()));
  {
    auto store = OpenStore(env.get());
    auto collector = NewCollector(store.get());
    WriteSession session(collector.get());
    v1::PushRequest request;
    std::string_view message;
    while (NextPushMessage(&stream, &message)) {
      if (!request.ParseFromArray(message.data(), static_cast<int>(message.size()))) break;
      auto outcome = session.Handle(request);
      if (!outcome.ok()) {
        // TK_FUZZ_VERBOSE=1: why a stream ended early (to check the seeds).
        if (std::getenv("TK_FUZZ_VERBOSE") != nullptr) {
          std::fprintf(stderr, "message %llu rejected: %s\n",
                       static_cast<unsigned long long>(request.seq()),
                       outcome.status().ToString().c_str());
        }
        break;
      }
      if (outcome->write.has_value()) {
        outcome->write->done = [](const absl::Status& s) {
          // The committer refuses what contradicts other writes (a step's
          // mode: ALREADY_EXISTS; too many workers: RESOURCE_EXHAUSTED), and
          // a stream's later writes with it; anything else is the store
          // failing, which the in-memory store never does.
          TK_FUZZ_CHECK(s.ok() || s.code() == absl::StatusCode::kAlreadyExists ||
                        s.code() == absl::StatusCode::kResourceExhausted);
        };
        collector->Submit(std::move(*outcome->write));
      }
      if (outcome->closes) break;
    }
    // The collector's destructor waits for the queued writes.
  }
  auto store = OpenStore(env.get());
  NewCollector(store.get());
}

}  // namespace
}  // namespace tensorkeep

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::warn);  // no line per recovery
  // Invalid UTF-8 in a string field is an expected rejection, not worth a log line.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tensorkeep::Push(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
