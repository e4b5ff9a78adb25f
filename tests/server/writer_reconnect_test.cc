// The C++ Writer survives its collector restarting (issue 13, point 5): a
// writer pushes steps while the collector process is stopped with SIGTERM and
// with kill -9 and restarted on the same data directory and port; a verifier
// then reads every value back (each step and tensor exactly once, with the
// value the test generated). And the give-up case: a collector that never
// comes back fails Flush/Close within the bounded time, naming what was not
// saved. A writer opened before its collector starts, and one abandoned
// during an outage (what it hands back is what was not acknowledged).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "client/trial.h"
#include "proto/limits.pb.h"
#include "client/writer.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Float32Record;
using testing::ServerProcess;

// A loopback port nobody listens on now (the collector is restarted on it).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

class WriterReconnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("reconnect");
    port_ = FreePort();
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Starts the collector on the test's port and directory (retrying briefly
  // while the old process's port is still being released).
  void StartServer() {
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      server_ = std::make_unique<ServerProcess>();
      if (server_->Start(
              {"--listen", Address(), "--data-dir", dir_ + "/db", "--log-level", "warn"})) {
        return;
      }
      ASSERT_LT(Clock::now(), give_up)
          << "cannot restart the collector on " << Address() << ": " << server_->stderr_text;
      server_->Wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // Stops the collector with `sig` and waits for it to exit.
  void Stop(int sig) {
    server_->Signal(sig);
    const int status = server_->Wait();
    if (sig == SIGKILL) {
      EXPECT_TRUE(WIFSIGNALED(status));
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << server_->stderr_text;
    }
    server_.reset();
  }
  client::WriterOptions Options(const std::string& trial) const {
    client::WriterOptions o;
    o.server = Address();
    o.trial = trial;
    // Small messages, chunks and buffer: many messages are in flight or
    // queued at each restart, and the writer blocks while disconnected.
    o.message_bytes = 16 << 10;
    o.chunk_bytes = 32 << 10;
    // (The buffer also bounds how far the writer runs ahead of the acks.)
    o.max_buffered_bytes = 256 << 10;
    return o;
  }

  std::string dir_;
  int port_ = 0;
  std::unique_ptr<ServerProcess> server_;
};

// What the test writes at each step: two small tensors and, every 25th step,
// a value of 5 chunks (its resend must start from its record).
constexpr int kSteps = 400;
std::vector<v1::TensorRecord> StepRecords(int s) {
  std::vector<v1::TensorRecord> out;
  out.push_back(Float32Record("a", s, 64, 1000 + s));
  out.push_back(Float32Record("b", s, 1024, 2000 + s));
  if (s % 25 == 0) out.push_back(Float32Record("big", s, 40000, 3000 + s));
  return out;
}

// Every value of `trial` read back, as (tensor, step, worker) -> data, with
// each value counted: a duplicate would be read twice.
void Verify(const std::string& address, const std::string& trial) {
  auto c = Connection::Open(address);
  ASSERT_TRUE(c.ok());
  client::Trial t(*c, trial);
  auto steps = t.Steps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  std::vector<uint64_t> want_steps(kSteps);
  for (int s = 0; s < kSteps; ++s) want_steps[s] = s;
  EXPECT_EQ(*steps, want_steps);
  auto names = t.TensorNames();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "big"}));
  for (const std::string name : {"a", "b", "big"}) {
    v1::TensorValuesRequest r;
    r.set_trial(trial);
    r.set_tensor(name);
    grpc::ClientContext ctx;
    auto reader = (*c)->stub()->GetValues(&ctx, r);
    std::map<uint64_t, std::string> got;
    int values = 0, wrong_worker = 0;
    uint64_t current = 0;
    v1::TensorValue m;
    const auto take = [&](v1::TensorValue& v) {
      if (v.header()) {
        ++values;
        current = v.step();
        if (v.worker() != "worker_0") ++wrong_worker;
        got[current];  // present
      }
      got[current].append(v.data());
    };
    while (reader->Read(&m)) {
      take(m);
      for (auto& b : *m.mutable_batched()) take(b);
    }
    ASSERT_TRUE(reader->Finish().ok());
    const size_t want = name == "big" ? (kSteps + 24) / 25 : kSteps;
    EXPECT_EQ(values, static_cast<int>(want)) << name << ": values read (a duplicate reads twice)";
    EXPECT_EQ(got.size(), want) << name;
    EXPECT_EQ(wrong_worker, 0);
    int wrong = 0;
    for (int s = 0; s < kSteps; ++s) {
      for (const auto& rec : StepRecords(s)) {
        if (rec.name() != name) continue;
        auto it = got.find(s);
        if (it == got.end() || it->second != rec.data()) ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0) << name << ": values missing or different";
  }
}

TEST_F(WriterReconnectTest, SigtermAndKill9RestartsLoseNothingAndDuplicateNothing) {
  StartServer();
  auto opened = client::Writer::Open(Options("restarts"));
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<client::Writer> w = std::move(*opened);
  std::atomic<int> written{0};
  absl::Status write_status;
  std::thread writer([&] {
    for (int s = 0; s < kSteps && write_status.ok(); ++s) {
      for (auto& r : StepRecords(s)) {
        write_status = w->Write(std::move(r));
        if (!write_status.ok()) break;
      }
      if (write_status.ok()) write_status = w->EndStep(s);
      written.store(s + 1);
      // Spread the steps over the restarts below.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const std::vector<int> signals = {SIGTERM, SIGKILL, SIGTERM, SIGKILL};
  int64_t committed_at_restart = -1;
  for (size_t i = 0; i < signals.size(); ++i) {
    // Each cycle's own bound: a restart recovers the data so far, which takes
    // longer as it grows (and several times longer under ASan).
    const auto deadline = Clock::now() + std::chrono::seconds(25);
    // Stop the collector once the writer has reconnected to this one and got
    // acks past this point (so every cycle interrupts a live stream), while
    // the writer is still writing.
    const int64_t target = static_cast<int64_t>(kSteps * (i + 1) / (signals.size() + 2));
    while ((w->CommittedThrough() < target || w->CommittedThrough() <= committed_at_restart) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_LT(Clock::now(), deadline) << "the writer made no progress after restart " << i;
    EXPECT_LT(written.load(), kSteps) << "the writer finished before restart " << i;
    committed_at_restart = w->CommittedThrough();
    Stop(signals[i]);
    StartServer();
  }
  writer.join();
  ASSERT_TRUE(write_status.ok()) << write_status;
  absl::Status closed = w->Close(true);
  ASSERT_TRUE(closed.ok()) << closed;
  EXPECT_GE(w->Reconnects(), static_cast<int>(signals.size()));
  Verify(Address(), "restarts");
}

TEST_F(WriterReconnectTest, GivesUpWithinTheRetryTimeoutNamingWhatWasNotSaved) {
  StartServer();
  client::WriterOptions o = Options("gone");
  o.retry_timeout_seconds = 1.5;
  auto opened = client::Writer::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<client::Writer> w = std::move(*opened);
  for (int s = 0; s < 10; ++s) {
    ASSERT_TRUE(w->Write(Float32Record("saved", s, 16, s)).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  ASSERT_TRUE(w->Flush().ok());
  Stop(SIGKILL);  // and never back
  for (int s = 10; s < 15; ++s) {
    ASSERT_TRUE(w->Write(Float32Record("lost", s, 16, s)).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  const auto start = Clock::now();
  absl::Status flushed = w->Flush();
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(absl::IsUnavailable(flushed)) << flushed;
  EXPECT_LT(took, 1.5 + 3.0) << "gave up late";
  const std::string message(flushed.message());
  EXPECT_NE(message.find("gave up reconnecting"), std::string::npos) << message;
  EXPECT_NE(message.find("not saved: 5 tensors at steps 10-14 ('lost')"), std::string::npos)
      << message;
  EXPECT_NE(message.find("the end of step 14"), std::string::npos) << message;
  EXPECT_EQ(message.find("'saved'"), std::string::npos) << "acknowledged data named: " << message;
  // Close and later writes give the same error at once.
  EXPECT_EQ(w->Close(true), flushed);
  EXPECT_EQ(w->Write(Float32Record("later", 20, 16, 1)), flushed);
}

// Writer::OpenInBackground (tensorkeep-agent's writers, issue 13): the
// collector is not there yet; writes are queued, the stream thread connects
// once it starts, and everything arrives once, in order.
TEST_F(WriterReconnectTest, OpenedInBackgroundBeforeTheCollectorStarts) {
  client::WriterOptions o = Options("later");
  o.retry_timeout_seconds = 60;
  o.max_buffered_bytes = 64 << 20;  // all steps fit while no collector listens
  auto opened = client::Writer::OpenInBackground(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<client::Writer> w = std::move(*opened);
  for (int s = 0; s < kSteps / 2; ++s) {
    for (auto& r : StepRecords(s)) ASSERT_TRUE(w->Write(std::move(r)).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  EXPECT_EQ(w->CommittedThrough(), -1);
  StartServer();
  for (int s = kSteps / 2; s < kSteps; ++s) {
    for (auto& r : StepRecords(s)) ASSERT_TRUE(w->Write(std::move(r)).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  absl::Status closed = w->Close(true);
  ASSERT_TRUE(closed.ok()) << closed;
  Verify(Address(), "later");
}

// Writer::Abandon hands back everything the collector did not acknowledge,
// in the order written, chunked values whole (tensorkeep-agent journals it
// when it stops during an outage); pushing that with another writer once the
// collector is back loses and duplicates nothing.
TEST_F(WriterReconnectTest, AbandonReturnsWhatWasNotAcknowledgedInOrder) {
  StartServer();
  client::WriterOptions o = Options("abandoned");
  o.retry_timeout_seconds = 60;
  o.max_buffered_bytes = 64 << 20;
  auto opened = client::Writer::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<client::Writer> w = std::move(*opened);
  const int acked = 100;
  for (int s = 0; s < acked; ++s) {
    for (auto& r : StepRecords(s)) ASSERT_TRUE(w->Write(std::move(r)).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  ASSERT_TRUE(w->Flush().ok());
  Stop(SIGKILL);
  for (int s = acked; s < kSteps; ++s) {
    for (auto& r : StepRecords(s)) ASSERT_TRUE(w->Write(std::move(r)).ok());
    ASSERT_TRUE(w->EndStep(s).ok());
  }
  // Let the stream thread build (and try to send) some of it.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<client::UnsavedItem> items = w->Abandon();
  EXPECT_FALSE(w->Write(Float32Record("late", kSteps, 4, 1)).ok());
  w.reset();
  // The records in order, each once, with its whole value; each step's end
  // after its records (ends of steps may be coalesced: at most one a step).
  std::vector<std::pair<std::string, uint64_t>> want, got;
  for (int s = acked; s < kSteps; ++s) {
    for (const auto& r : StepRecords(s)) want.emplace_back(r.name(), r.step());
  }
  int64_t ended = acked - 1;
  int wrong_values = 0, out_of_order = 0;
  for (const auto& item : items) {
    if (item.kind == client::UnsavedItem::kRecord) {
      got.emplace_back(item.record.name(), item.record.step());
      if (static_cast<int64_t>(item.record.step()) <= ended) ++out_of_order;
      bool found = false;
      for (const auto& r : StepRecords(item.record.step())) {
        if (r.name() == item.record.name()) found = r.data() == item.record.data();
      }
      if (!found) ++wrong_values;
    } else if (item.kind == client::UnsavedItem::kEndStep) {
      if (static_cast<int64_t>(item.step) <= ended) ++out_of_order;
      ended = item.step;
    }
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(wrong_values, 0);
  EXPECT_EQ(out_of_order, 0);
  EXPECT_EQ(ended, kSteps - 1);
  // Pushed by another writer, the trial is whole.
  StartServer();
  auto again = client::Writer::Open(o);
  ASSERT_TRUE(again.ok()) << again.status();
  for (auto& item : items) {
    if (item.kind == client::UnsavedItem::kRecord) {
      ASSERT_TRUE((*again)->Write(std::move(item.record)).ok());
    } else if (item.kind == client::UnsavedItem::kEndStep) {
      ASSERT_TRUE((*again)->EndStep(item.step).ok());
    }
  }
  ASSERT_TRUE((*again)->Close(true).ok());
  Verify(Address(), "abandoned");
}


// A hung collector (SIGSTOP: its process frozen, its TCP connection open) is
// detected by the C++ writer's gRPC keepalive (proto/limits.proto,
// KeepalivePolicy, set in client/connection.cc): it drops the connection
// within KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS and reconnects; once the
// collector runs again (SIGCONT) it resends what was not acknowledged, with no
// loss and no duplicate. (tests/python/test_keepalive.py does the same for the
// Python writer, through the agent.)
TEST_F(WriterReconnectTest, AHungCollectorIsDroppedAndTheWriterResends) {
  StartServer();
  client::WriterOptions o = Options("hung");
  o.retry_timeout_seconds = 120;
  auto opened = client::Writer::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<client::Writer> w = std::move(*opened);
  const auto write_steps = [&](int first, int last) {
    for (int s = first; s <= last; ++s) {
      for (auto& r : StepRecords(s)) ASSERT_TRUE(w->Write(std::move(r)).ok());
      ASSERT_TRUE(w->EndStep(s).ok());
    }
  };
  // Only steps 0..kSteps-1 are verified: write all of them, around the hang.
  write_steps(0, 9);
  ASSERT_TRUE(w->Flush().ok());
  const uint64_t streams = w->StreamsOpened();
  server_->Signal(SIGSTOP);
  const auto stopped = Clock::now();
  // Sent into the frozen collector's socket buffers (the small buffer makes
  // the writer block until it reconnects: in a thread).
  std::thread more([&] { write_steps(10, 19); });
  const double detect_s = (v1::KEEPALIVE_TIME_MS + v1::KEEPALIVE_TIMEOUT_MS) / 1000.0;
  const auto deadline = stopped + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(detect_s + 20));
  while (w->StreamsOpened() == streams && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double detected = std::chrono::duration<double>(Clock::now() - stopped).count();
  server_->Signal(SIGCONT);
  ASSERT_GT(w->StreamsOpened(), streams) << "the writer never dropped the hung connection";
  // It was the keepalive, not a fluke of the connection.
  EXPECT_GE(detected, v1::KEEPALIVE_TIME_MS / 1000.0 * 0.5);
  std::printf("hung collector detected after %.1f s (keepalive %.0f s)\n", detected, detect_s);
  more.join();
  write_steps(20, kSteps - 1);
  absl::Status closed = w->Close(true);
  ASSERT_TRUE(closed.ok()) << closed;
  EXPECT_GE(w->Reconnects(), 1);
  Verify(Address(), "hung");
}

}  // namespace
}  // namespace tensorkeep
