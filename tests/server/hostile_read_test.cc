// Hostile readers against a real tensorkeep-server process: clients that ask
// for large values and then read slowly (or not at all) do not make the
// collector hold those values whole, and others are served meanwhile.
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "client/connection.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

v1::TensorRecord Bytes(const std::string& name, size_t n) {
  v1::TensorRecord r;
  r.set_name(name);
  r.set_step(0);
  r.set_mode(v1::TRAIN);
  r.set_dtype(v1::UINT8);
  r.add_shape(static_cast<int64_t>(n));
  r.set_has_value(true);
  r.set_value_size(n);
  std::string data(n, '\0');
  // Not constant, so that a piece sent twice or out of order shows.
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>((i * 131) ^ (i >> 13));
  r.set_data(std::move(data));
  return r;
}

TEST(HostileReadTest, StalledReadersOfLargeValuesDoNotMakeTheCollectorHoldThemWhole) {
  const std::string dir = testing::MakeTempDir("hostile_read");
  testing::ServerProcess server;
  ASSERT_TRUE(server.Start({"--listen", "127.0.0.1:0", "--data-dir", dir + "/db",
                            "--value-cache-mb", "0", "--log-level", "error"}))
      << server.first_line << server.stderr_text;
  auto connection = Connection::Open(server.address);
  ASSERT_TRUE(connection.ok());
  constexpr size_t kValueBytes = size_t{64} << 20;
  const v1::TensorRecord big = Bytes("big", kValueBytes);
  {
    auto w = testing::OpenWriter(server.address, "t");
    ASSERT_NE(w, nullptr);
    ASSERT_TRUE(w->Write(big).ok());
    ASSERT_TRUE(w->Close(true).ok());
  }
  const uint64_t rss_before = server.RssBytes();

  // 24 calls each take the first message of the 64 MiB value and then stop
  // reading. Holding the value whole per call, that is 1.5 GiB.
  constexpr int kStalled = 24;
  struct Call {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::TensorValue>> reader;
  };
  v1::TensorRequest request;
  request.set_trial("t");
  request.set_tensor("big");
  request.set_step(0);
  std::vector<std::unique_ptr<Call>> calls;
  int started = 0;
  for (int i = 0; i < kStalled; ++i) {
    auto c = std::make_unique<Call>();
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    c->reader = (*connection)->stub()->GetValue(&c->ctx, request);
    v1::TensorValue first;
    if (c->reader->Read(&first) && first.header() && first.value_size() == kValueBytes) ++started;
    calls.push_back(std::move(c));
  }
  EXPECT_EQ(started, kStalled);
  // Let the server go as far ahead as it will.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  // Meanwhile a reader that reads gets the whole value, byte for byte.
  auto value = client::Tensor(*connection, "t", "big").GetValue(0);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->data == big.data()) << "the streamed value differs from what was written";

  const uint64_t rss_stalled = server.RssBytes();
  std::printf(
      "hostile_read: %d stalled readers of a %zu MiB value: server RSS %.0f MiB "
      "(%.0f MiB before)\n",
      kStalled, kValueBytes >> 20, rss_stalled / 1048576.0, rss_before / 1048576.0);
  // Each stalled call holds at most a chunk or two (4 MiB each) in the server
  // and gRPC's buffers; whole values would be 24 x 64 MiB.
  EXPECT_LT(rss_stalled, rss_before + (uint64_t{kStalled} * kValueBytes) / 4);
  for (auto& c : calls) c->ctx.TryCancel();
  for (auto& c : calls) c->reader->Finish();
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.stderr_text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensorkeep
