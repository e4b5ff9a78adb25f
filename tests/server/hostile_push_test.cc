// Hostile writers against a real tensorkeep-server process: whatever they
// send, the collector's memory stays within its budget, it keeps serving
// others, and what was stored before is intact.
#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "client/connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;

TEST(HostilePushTest, TwoHundredStreamsStartingHalfGigabyteRecordsStayWithinTheBudget) {
  const std::string dir = testing::MakeTempDir("hostile");
  testing::ServerProcess server;
  ASSERT_TRUE(server.Start({"--listen", "127.0.0.1:0", "--data-dir", dir + "/db",
                            "--memory-budget-mb", "1024", "--log-level", "error"}))
      << server.first_line << server.stderr_text;
  auto connection = Connection::Open(server.address);
  ASSERT_TRUE(connection.ok());
  // Something stored before, by a well-behaved writer.
  v1::TensorRecord kept = Float32Record("kept", 0, 1000, 1);
  {
    auto w = testing::OpenWriter(server.address, "victim");
    ASSERT_NE(w, nullptr);
    ASSERT_TRUE(w->Write(kept).ok());
    ASSERT_TRUE(w->Close(true).ok());
  }
  const uint64_t rss_before = server.PeakRssBytes();

  // 200 streams, each declaring a 512 MiB tensor and sending its first 4 MiB
  // and one more chunk, then keeping the stream open.
  constexpr int kStreams = 200;
  constexpr size_t kChunk = 4 << 20;
  const std::string bytes(kChunk, '\x01');
  v1::PushRequest head;
  {
    v1::TensorRecord* r = head.mutable_records()->add_records();
    r->set_name("huge");
    r->set_step(0);
    r->set_mode(v1::TRAIN);
    r->set_dtype(v1::UINT8);
    r->add_shape(512 << 20);
    r->set_has_value(true);
    r->set_value_size(512u << 20);
    r->set_data(bytes);
  }
  v1::PushRequest chunk;
  chunk.mutable_chunk()->set_data(bytes);
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::PushRequest, v1::PushResponse>> rw;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  int written = 0;
  for (int i = 0; i < kStreams; ++i) {
    auto s = std::make_unique<Stream>();
    s->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    s->rw = (*connection)->stub()->Push(&s->ctx);
    v1::PushRequest open;
    open.set_seq(1);
    open.mutable_open()->set_trial("hostile");
    open.mutable_open()->set_worker("worker_" + std::to_string(i));
    open.mutable_open()->set_num_workers(1);
    head.set_seq(2);
    chunk.set_seq(3);
    if (s->rw->Write(open) && s->rw->Write(head) && s->rw->Write(chunk)) ++written;
    streams.push_back(std::move(s));
  }
  // The collector still serves others meanwhile, and what it stored is intact.
  auto value = client::Tensor(*connection, "victim", "kept").GetValue(0);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->data, kept.data());
  const uint64_t peak = server.PeakRssBytes();
  std::printf(
      "hostile_push: %d of %d streams took all 3 messages; server peak RSS %.0f MiB "
      "(%.0f MiB before)\n",
      written, kStreams, peak / 1048576.0, rss_before / 1048576.0);
  // Without the budget each stream held its 8 MiB: 1.6 GB. With it, one
  // record of 512 MiB is admitted (its room reserved, its pages touched only
  // as chunks come) and the others are refused at their first message.
  EXPECT_LT(peak, uint64_t{512} << 20);
  for (auto& s : streams) s->ctx.TryCancel();
  for (auto& s : streams) s->rw->Finish();
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.stderr_text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensorkeep
