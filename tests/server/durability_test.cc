// Every acknowledged write survives kill -9 of the collector; the server
// refuses a data directory in use and stops cleanly on SIGTERM.
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/errors.h"
#include "client/trial.h"
#include "client/writer.h"
#include "gmock/gmock.h"
#include "storage/keys.h"
#include "storage/leveldb_tensor_store.h"
#include "tests/server/server_process.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using ::testing::HasSubstr;
using testing::Float32Record;
using testing::ServerProcess;

class DurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("durability"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A writer of `trial`, one worker, on `server`.
  static std::unique_ptr<client::Writer> OpenWriter(const ServerProcess& server,
                                                    const std::string& trial) {
    client::WriterOptions o;
    o.server = server.address;
    o.trial = trial;
    auto w = client::Writer::Open(o);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(*w) : nullptr;
  }
  std::vector<std::string> Args() const {
    return {"--listen", "127.0.0.1:0", "--data-dir", dir_ + "/db", "--log-level", "warn"};
  }
  std::string dir_;
};

TEST_F(DurabilityTest, AcknowledgedWritesSurviveKill9) {
  constexpr int kSteps = 150;
  // t0 and t1 are small (their bytes inline in record blocks), t2 is large (in
  // the values database): both stores must come back whole.
  const auto elements = [](int t) { return t == 2 ? 16384 : 256; };
  {
    ServerProcess server;
    ASSERT_TRUE(server.Start(Args())) << server.stderr_text;
    // Writers stay open through the crash, as a crashing world would leave them.
    std::vector<std::unique_ptr<client::Writer>> writers;
    client::WriterOptions o;
    o.server = server.address;
    o.trial = "crash";
    // They die with the collector (no reconnecting: it comes back on another port).
    o.retry_timeout_seconds = 0;
    for (const char* worker : {"worker_0", "worker_1"}) {
      o.worker = worker;
      o.num_workers = 2;
      auto w = client::Writer::Open(o);
      ASSERT_TRUE(w.ok()) << w.status();
      for (int s = 0; s < kSteps; ++s) {
        for (int t = 0; t < 3; ++t) {
          const uint32_t seed = s * 10 + t + (worker[7] == '1' ? 5000 : 0);
          ASSERT_TRUE(
              (*w)->Write(Float32Record("t" + std::to_string(t), s, elements(t), seed)).ok());
        }
        ASSERT_TRUE((*w)->EndStep(s).ok());
      }
      ASSERT_TRUE((*w)->Flush().ok());  // everything above is acknowledged
      // Unacknowledged extra writes may or may not survive; none may corrupt.
      ASSERT_TRUE((*w)->Write(Float32Record("extra", kSteps, 256, 1)).ok());
      writers.push_back(std::move(*w));
    }
    server.Signal(SIGKILL);
    const int status = server.Wait();
    ASSERT_TRUE(WIFSIGNALED(status));
    writers.clear();  // their streams broke; closing them fails quietly
  }
  ServerProcess again;
  ASSERT_TRUE(again.Start(Args())) << again.stderr_text;
  auto c = Connection::Open(again.address);
  client::Trial trial(*c, "crash");
  auto steps = trial.Steps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_GE(steps->size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ((*steps)[s], static_cast<uint64_t>(s));
  for (int s = 0; s < kSteps; s += 7) {
    for (const char* worker : {"worker_0", "worker_1"}) {
      for (int t = 0; t < 3; ++t) {
        const uint32_t seed = s * 10 + t + (worker[7] == '1' ? 5000 : 0);
        auto v = trial.tensor("t" + std::to_string(t)).GetValue(s, client::kGlobal, worker);
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_EQ(v->data, Float32Record("x", s, elements(t), seed).data()) << "step " << s;
      }
    }
  }
  // Writing continues after the restart.
  client::WriterOptions o;
  o.server = again.address;
  o.trial = "crash";
  o.worker = "worker_0";
  o.num_workers = 2;
  auto w = client::Writer::Open(o);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(Float32Record("t0", kSteps + 5, 8, 1)).ok());
  ASSERT_TRUE((*w)->Flush().ok());
}

TEST_F(DurabilityTest, ASecondServerOnTheSameDirectoryFailsClearly) {
  ServerProcess first;
  ASSERT_TRUE(first.Start(Args()));
  ServerProcess second;
  EXPECT_FALSE(second.Start(Args()));
  const int status = second.Wait();
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_THAT(second.stderr_text, HasSubstr("in use by another tensorkeep-server"));
}

TEST_F(DurabilityTest, SigtermShutsDownCleanlyAndDataRemains) {
  {
    ServerProcess server;
    ASSERT_TRUE(server.Start(Args()));
    auto w = OpenWriter(server, "clean");
    ASSERT_NE(w, nullptr);
    ASSERT_TRUE(w->Write(Float32Record("x", 0, 16, 3)).ok());
    ASSERT_TRUE(w->Close(true).ok());
    server.Signal(SIGTERM);
    const int status = server.Wait();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_THAT(server.stderr_text, ::testing::Not(HasSubstr("error")));
  }
  ServerProcess again;
  ASSERT_TRUE(again.Start(Args()));
  auto c = Connection::Open(again.address);
  client::Trial trial(*c, "clean");
  auto v = trial.tensor("x").GetValue(0);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->data, Float32Record("x", 0, 16, 3).data());
  EXPECT_TRUE(trial.Summary()->ended());
}

TEST_F(DurabilityTest, ADamagedValueFileFailsOnlyItsTensorWithDataLoss) {
  {
    ServerProcess server;
    ASSERT_TRUE(server.Start(Args()));
    auto w = OpenWriter(server, "damaged");
    ASSERT_NE(w, nullptr);
    for (int step = 0; step < 2; ++step) {
      ASSERT_TRUE(w->Write(Float32Record("big", step, 16384, step + 1)).ok());  // value log
      ASSERT_TRUE(w->Write(Float32Record("small", step, 16, step + 1)).ok());   // its block
      ASSERT_TRUE(w->EndStep(step).ok());
    }
    ASSERT_TRUE(w->Close(true).ok());
    server.Signal(SIGTERM);
    ASSERT_TRUE(WIFEXITED(server.Wait()));
  }
  // One bit of the first value written (big at step 0) flips on disk.
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/db/" + kValuesSubdir)) {
    files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(100);
    f.write(&c, 1);
  }
  ServerProcess again;
  ASSERT_TRUE(again.Start(Args()));
  auto conn = Connection::Open(again.address);
  client::Trial trial(*conn, "damaged");
  auto bad = trial.tensor("big").GetValue(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tensor 'big' at step 0"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("checksum"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(files[0].filename().string()));
  // Everything else reads back whole.
  auto good = trial.tensor("big").GetValue(1);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->data, Float32Record("big", 1, 16384, 2).data());
  auto small = trial.tensor("small").GetValue(0);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->data, Float32Record("small", 0, 16, 1).data());
}

TEST_F(DurabilityTest, ADatabaseOfAnotherFormatIsRefusedWithAnActionableMessage) {
  {
    LevelDbOptions o;
    o.path = dir_ + "/db";
    auto store = LevelDbTensorStore::Open(o);
    ASSERT_TRUE(store.ok());
    auto batch = (*store)->NewBatch();
    batch->Put(TrialKey("old"), "written without a format marker");
    ASSERT_TRUE((*store)->Write(batch.get(), true).ok());
  }
  ServerProcess server;
  EXPECT_FALSE(server.Start(Args()));
  const int status = server.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  EXPECT_THAT(server.stderr_text, HasSubstr("older tensorkeep"));
  EXPECT_THAT(server.stderr_text, HasSubstr("choose another --data-dir"));
  EXPECT_THAT(server.stderr_text, HasSubstr(dir_ + "/db"));
}

TEST_F(DurabilityTest, FirstLineIsExactlyListeningOnTheRealPort) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(Args()));
  EXPECT_THAT(server.first_line, ::testing::MatchesRegex("listening on 127\\.0\\.0\\.1:[1-9][0-9]*"));
  EXPECT_THAT(server.first_line, ::testing::Not(HasSubstr(":0")));
}

}  // namespace
}  // namespace tensorkeep
