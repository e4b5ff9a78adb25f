// What a Push stream acknowledges, over real gRPC: an ack covers a message
// only once its data is durable — never a record still waiting for its
// chunks, never a write that failed or anything after it — and a stream
// never ends with OK when the collector did not take all it was sent.
#include <atomic>
#include <chrono>
#include <thread>

#include "base/errors.h"
#include "client/connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "leveldb/helpers/memenv.h"
#include "server/collector_server.h"
#include "server/push_reactor.h"
#include "tests/server/test_server.h"
#include "tests/storage/fault_env.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;
using ::testing::HasSubstr;

class PushAckTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Start()); }
  void TearDown() override { server_.reset(); }
  void Start() {
    server_.reset();
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.store.path = "/db";
    o.store.env = &env_;
    o.store.reopen_interval_seconds = 0;
    o.collector.memory_budget_bytes = memory_budget_;
    testing::StartServer(o, &server_, &connection_);
  }

  // A raw Push stream: the test writes messages and reads acks itself.
  struct RawStream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::PushRequest, v1::PushResponse>> stream;
    uint64_t seq = 0;
    uint64_t acked = 0;
    bool Send(v1::PushRequest m) {
      m.set_seq(++seq);
      return stream->Write(m);
    }
    // Sends Flush and reads acks until one covers it or the stream ends;
    // returns the highest acked seq.
    uint64_t Flush() {
      v1::PushRequest f;
      f.mutable_flush();
      if (!Send(f)) return acked;
      const uint64_t want = seq;
      v1::PushResponse ack;
      while (acked < want && stream->Read(&ack)) acked = std::max(acked, ack.acked_seq());
      return acked;
    }
  };
  std::unique_ptr<RawStream> OpenStream(const std::string& worker = "worker_0") {
    auto s = std::make_unique<RawStream>();
    s->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    s->stream = connection_->stub()->Push(&s->ctx);
    v1::PushRequest o;
    o.mutable_open()->set_trial("t");
    o.mutable_open()->set_worker(worker);
    o.mutable_open()->set_num_workers(1);
    s->Send(o);
    return s;
  }
  static v1::PushRequest Records(std::vector<v1::TensorRecord> records) {
    v1::PushRequest m;
    for (auto& r : records) *m.mutable_records()->add_records() = std::move(r);
    return m;
  }
  static v1::PushRequest Chunk(const std::string& data) {
    v1::PushRequest m;
    m.mutable_chunk()->set_data(data);
    return m;
  }
  // Ends the stream (Close, then half-close) and returns its status.
  static grpc::Status Finish(RawStream* s) {
    v1::PushRequest c;
    c.mutable_close();
    s->Send(c);
    s->stream->WritesDone();
    v1::PushResponse ack;
    while (s->stream->Read(&ack)) s->acked = std::max(s->acked, ack.acked_seq());
    return s->stream->Finish();
  }
  std::string ValueOf(const std::string& tensor, uint64_t step) {
    auto v = client::Tensor(connection_, "t", tensor).GetValue(step);
    return v.ok() ? v->data : v.status().ToString();
  }

  std::unique_ptr<leveldb::Env> mem_{leveldb::NewMemEnv(leveldb::Env::Default())};
  testing::FaultEnv env_{mem_.get()};
  size_t memory_budget_ = CollectorOptions().memory_budget_bytes;
  std::unique_ptr<CollectorServer> server_;
  std::shared_ptr<Connection> connection_;
};

TEST_F(PushAckTest, ARecordWaitingForItsChunksIsNotAcknowledged) {
  auto s = OpenStream();
  ASSERT_EQ(s->Flush(), 2u);
  v1::TensorRecord big = Float32Record("big", 0, 4096, 7);
  const std::string all = big.data();
  big.set_value_size(all.size());
  big.set_data(all.substr(0, 6000));
  ASSERT_TRUE(s->Send(Records({big})));  // seq 3: starts the record
  // Nothing but Chunks may follow now; make the server ack on its own: a
  // rule's stop request is sent to every writer of the trial at once. (The
  // pause lets the server read message 3 first.)
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  v1::RuleStatus stop;
  stop.set_trial("t");
  stop.set_rule("r");
  stop.set_state(v1::RuleStatus::ISSUES_FOUND);
  stop.set_action("stop");
  grpc::ClientContext rctx;
  v1::RuleStatus reply;
  ASSERT_TRUE(connection_->stub()->ReportRuleStatus(&rctx, stop, &reply).ok());
  v1::PushResponse ack;
  bool stop_seen = false;
  while (!stop_seen && s->stream->Read(&ack)) {
    stop_seen = ack.stop_requested();
    EXPECT_LE(ack.acked_seq(), 2u) << "an ack covered a record that is only in memory";
  }
  ASSERT_TRUE(stop_seen);
  ASSERT_TRUE(s->Send(Chunk(all.substr(6000, 6000))));
  ASSERT_TRUE(s->Send(Chunk(all.substr(12000))));
  EXPECT_EQ(s->Flush(), s->seq);
  EXPECT_TRUE(Finish(s.get()).ok());
  EXPECT_EQ(ValueOf("big", 0), all);
}

// A stream cut in the middle of a chunked record: the writer resends the
// record whole on a new stream (nothing of it was acknowledged).
TEST_F(PushAckTest, AStreamCutMidRecordIsResentWholeOnANewStream) {
  v1::TensorRecord big = Float32Record("big", 0, 4096, 8);
  const std::string all = big.data();
  {
    auto s = OpenStream();
    v1::TensorRecord first = big;
    first.set_value_size(all.size());
    first.set_data(all.substr(0, 8000));
    ASSERT_EQ(s->Flush(), 2u);
    ASSERT_TRUE(s->Send(Records({first})));
    s->ctx.TryCancel();
    s->stream->Finish();
  }
  // The collector frees the worker once it has seen the old stream end.
  std::unique_ptr<RawStream> s;
  grpc::Status opened;
  for (int attempt = 0; attempt < 100; ++attempt) {
    s = OpenStream();
    if (s->Flush() == 2u) break;
    opened = s->stream->Finish();
    s.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(s, nullptr) << opened.error_message();
  ASSERT_TRUE(s->Send(Records({big})));
  ASSERT_TRUE(s->Send([] {
    v1::PushRequest e;
    e.mutable_end_step()->set_step(0);
    return e;
  }()));
  EXPECT_EQ(s->Flush(), s->seq);
  EXPECT_TRUE(Finish(s.get()).ok());
  EXPECT_EQ(ValueOf("big", 0), all);
}

TEST_F(PushAckTest, AFailedWriteIsNeverAcknowledgedAndTheResendIsKept) {
  auto s = OpenStream();
  ASSERT_TRUE(s->Send(Records({Float32Record("x", 0, 16, 1)})));
  ASSERT_EQ(s->Flush(), 3u);
  env_.FailAppends(".log", 1, /*short_write=*/true);
  ASSERT_TRUE(s->Send(Records({Float32Record("x", 1, 16, 2)})));  // seq 4
  s->Send([] {
    v1::PushRequest e;
    e.mutable_end_step()->set_step(1);
    return e;
  }());
  s->Flush();
  grpc::Status status = Finish(s.get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("nothing from message 4 on was acknowledged"));
  EXPECT_LT(s->acked, 4u) << "the failed message was acknowledged";
  // The writer resends from message 4 on a new stream.
  auto again = OpenStream();
  ASSERT_TRUE(again->Send(Records({Float32Record("x", 1, 16, 2)})));
  EXPECT_EQ(again->Flush(), again->seq);
  EXPECT_TRUE(Finish(again.get()).ok());
  ASSERT_NO_FATAL_FAILURE(Start());  // a restart finds both
  EXPECT_EQ(ValueOf("x", 0), Float32Record("x", 0, 16, 1).data());
  EXPECT_EQ(ValueOf("x", 1), Float32Record("x", 1, 16, 2).data());
}

TEST_F(PushAckTest, AMessageThatCannotBeParsedEndsTheStreamWithAnError) {
  auto s = OpenStream();
  ASSERT_TRUE(s->Send(Records({Float32Record("x", 0, 16, 1)})));
  ASSERT_EQ(s->Flush(), 3u);
  // A tensor name that is not UTF-8: the client's protobuf serializes it
  // (complaining in its log), the server's cannot parse it.
  v1::TensorRecord bad = Float32Record("ok", 1, 16, 2);
  bad.set_name("bad\xff\xfe");
  s->Send(Records({bad}));
  s->stream->WritesDone();
  v1::PushResponse ack;
  while (s->stream->Read(&ack)) s->acked = std::max(s->acked, ack.acked_seq());
  grpc::Status status = s->stream->Finish();
  EXPECT_FALSE(status.ok()) << "the stream ended OK though a record was dropped";
  EXPECT_EQ(s->acked, 3u);
  EXPECT_EQ(ValueOf("x", 0), Float32Record("x", 0, 16, 1).data());
}

// A stream told to end (here: its trial deleted) while it is handling a
// message it has read ends only after that message's write is back from the
// committer. It used to end at once: gRPC then deleted the reactor, and the
// write's completion called into freed memory (found by ASan: a failed
// commit during the next message, python_test_full_disk).
TEST_F(PushAckTest, AStreamEndsOnlyAfterTheMessageItIsHandlingIsWritten) {
  auto s = OpenStream();
  ASSERT_TRUE(s->Send(Records({Float32Record("x", 0, 16, 1)})));
  ASSERT_EQ(s->Flush(), 3u);
  // The client sees the stream end on this thread.
  std::atomic<bool> ended{false};
  std::thread reader([&] {
    v1::PushResponse ack;
    while (s->stream->Read(&ack)) {
    }
    ended = true;
  });
  std::atomic<bool> hooked{false};
  std::atomic<bool> ended_while_handling{false};
  PushReactor::SetHandledHookForTesting([&](uint64_t seq) {
    if (seq != 4) return;
    hooked = true;
    grpc::ClientContext ctx;
    v1::DeleteTrialRequest del;
    del.set_trial("t");
    v1::DeleteTrialResponse reply;
    EXPECT_TRUE(connection_->stub()->DeleteTrial(&ctx, del, &reply).ok());
    // Give a wrongly finished stream the time to reach the client.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!ended && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ended_while_handling = ended.load();
  });
  ASSERT_TRUE(s->Send(Records({Float32Record("x", 1, 16, 2)})));  // seq 4
  s->stream->WritesDone();
  reader.join();
  PushReactor::SetHandledHookForTesting(nullptr);
  const grpc::Status status = s->stream->Finish();
  ASSERT_TRUE(hooked) << "message 4 was never handled";
  EXPECT_FALSE(ended_while_handling) << "the stream ended while message 4 was being handled";
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("deleted")) << status.error_message();
}

TEST_F(PushAckTest, ASecondLiveStreamForOneWorkerIsRefusedWithAClearMessage) {
  auto first = OpenStream();
  ASSERT_EQ(first->Flush(), 2u);
  auto second = OpenStream();
  second->Flush();
  second->stream->WritesDone();
  grpc::Status status = second->stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);  // CONFLICT: not retried
  EXPECT_THAT(status.error_message(), HasSubstr("already has a live Push stream"));
  EXPECT_TRUE(Finish(first.get()).ok());
}

// A record waiting for its chunks holds its whole size of the memory budget
// from its first message: a client cannot grow the collector past it.
TEST_F(PushAckTest, RecordsInTransitDrawOnTheMemoryBudget) {
  memory_budget_ = 64 << 20;
  ASSERT_NO_FATAL_FAILURE(Start());
  MemoryBudget* budget = server_->collector()->memory();
  const size_t base = budget->used();  // the value cache's share: a quarter
  EXPECT_EQ(base, 16u << 20);
  const auto wait_used = [&](size_t want) {
    for (int i = 0; i < 200 && budget->used() != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return budget->used();
  };
  // Records of 16 MiB, each starting with 1 MiB: room for three.
  const v1::TensorRecord full = Float32Record("big", 0, 4 << 20, 3);
  v1::TensorRecord head = full;
  head.set_value_size(full.data().size());
  head.set_data(full.data().substr(0, 1 << 20));
  std::vector<std::unique_ptr<RawStream>> held;
  int refused = 0;
  for (int i = 0; i < 6; ++i) {
    auto s = OpenStream("worker_" + std::to_string(i));
    ASSERT_EQ(s->Flush(), 2u);
    ASSERT_TRUE(s->Send(Records({head})));
    if (i < 3) {  // admitted: its room is taken at once
      const size_t want = base + (i + 1) * (16u << 20);
      ASSERT_EQ(wait_used(want), want) << "record " << i << " was not admitted";
      held.push_back(std::move(s));
      continue;
    }
    ++refused;  // no room: the stream ends
    s->stream->WritesDone();
    grpc::Status status = s->stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("memory budget (64 MiB"));
  }
  EXPECT_EQ(held.size(), 3u);
  EXPECT_EQ(refused, 3);
  EXPECT_LE(budget->used(), budget->limit());
  // A record larger than half the budget can never fit: said at once.
  {
    auto s = OpenStream("worker_big");
    ASSERT_EQ(s->Flush(), 2u);
    v1::TensorRecord huge = head;
    huge.clear_shape();
    huge.add_shape(10 << 20);
    huge.set_value_size(40u << 20);
    ASSERT_TRUE(s->Send(Records({huge})));
    s->stream->WritesDone();
    grpc::Status status = s->stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(), HasSubstr("--memory-budget-mb"));
  }
  // Writers that go away give their room back; a record then gets through.
  for (auto& s : held) s->ctx.TryCancel();
  held.clear();
  EXPECT_EQ(wait_used(base), base);
  auto s = OpenStream("worker_0");
  ASSERT_EQ(s->Flush(), 2u);
  ASSERT_TRUE(s->Send(Records({head})));
  for (size_t off = 1 << 20; off < full.data().size(); off += 4 << 20) {
    ASSERT_TRUE(s->Send(Chunk(full.data().substr(off, 4 << 20))));
  }
  EXPECT_EQ(s->Flush(), s->seq);
  EXPECT_TRUE(Finish(s.get()).ok());
  EXPECT_EQ(ValueOf("big", 0), full.data());
  EXPECT_EQ(wait_used(base), base);
}

}  // namespace
}  // namespace tensorkeep
