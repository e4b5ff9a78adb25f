// Crash safety of deletion and of the value log's rewrite: a failure
// injected at each stage of a trial's deletion (the atomic first write, each
// batch of the removal, after the compaction, and each stage of a value-file
// rewrite), and real server processes aborted at those stages or killed
// with SIGKILL mid-deletion. After a restart the deleted trial is whole or
// gone (never half there), every other trial reads back bit for bit, and the
// restarted collector finishes the removal: no key of the trial is left.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "base/errors.h"
#include "gtest/gtest.h"
#include "leveldb/env.h"
#include "storage/keys.h"
#include "storage/leveldb_tensor_store.h"
#include "tests/server/server_process.h"
#include "tests/server/test_server.h"
#include "tests/storage/fault_env.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;
using testing::MakeTempDir;
using testing::StartServer;

constexpr int kSteps = 4;
constexpr int kLargeFloats = 16384;  // 64 KiB: in the value log

using Written = std::map<std::tuple<std::string, std::string, uint64_t>, std::string>;
const std::vector<std::string> kTrials = {"keep-a", "doomed", "keep-c"};

// Writes the trials step by step, interleaved (each step flushed), so that
// every value file holds values of several trials: deleting one leaves files
// partly live, which the reclaim rewrites.
void WriteTrials(const std::string& address, Written* written, int floats = kLargeFloats) {
  std::vector<std::unique_ptr<client::Writer>> writers;
  for (const std::string& trial : kTrials) {
    writers.push_back(testing::OpenWriter(address, trial));
    ASSERT_NE(writers.back(), nullptr);
  }
  uint32_t seed = 1;
  for (int step = 0; step < kSteps; ++step) {
    for (size_t t = 0; t < kTrials.size(); ++t) {
      for (const auto& [name, n] : {std::pair<std::string, int>{"big", floats},
                                    std::pair<std::string, int>{"small", 8}}) {
        v1::TensorRecord r = Float32Record(name, step, n, seed++);
        (*written)[{kTrials[t], name, static_cast<uint64_t>(step)}] = r.data();
        ASSERT_TRUE(writers[t]->Write(std::move(r)).ok());
      }
      ASSERT_TRUE(writers[t]->EndStep(step).ok());
      ASSERT_TRUE(writers[t]->Flush().ok());
    }
  }
  for (auto& w : writers) ASSERT_TRUE(w->Close(true).ok());
}

// The values of every trial but `except` ("" : all) read back bit for bit.
void ExpectIntact(const std::shared_ptr<Connection>& c, const Written& written,
                  const std::string& except) {
  for (const auto& [where, bytes] : written) {
    const auto& [trial, name, step] = where;
    if (trial == except) continue;
    auto v = client::Tensor(c, trial, name).GetValue(step);
    ASSERT_TRUE(v.ok()) << trial << "/" << name << "/" << step << ": " << v.status();
    EXPECT_TRUE(v->data == bytes) << trial << "/" << name << "/" << step;
  }
}

// Keys of `trial` left in the store at `path` (the server stopped).
size_t KeysLeft(const std::string& path, const std::string& trial) {
  LevelDbOptions o;
  o.path = path;
  auto store = LevelDbTensorStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return 0;
  size_t n = 0;
  const auto count = [&](std::string_view, size_t) {
    ++n;
    return true;
  };
  for (KeyFamily f : {KeyFamily::kTrial, KeyFamily::kWorker, KeyFamily::kBlock, KeyFamily::kRule,
                      KeyFamily::kDeletedTrial, KeyFamily::kCollections}) {
    EXPECT_TRUE((*store)->ScanKeys(TrialPrefix(f, trial), "", count).ok());
  }
  // Large values: keys of the value family naming the trial.
  EXPECT_TRUE((*store)
                  ->ScanKeys(FamilyPrefix(KeyFamily::kValue), "",
                             [&](std::string_view key, size_t) {
                               KeyReader r(key);
                               KeyFamily f;
                               uint64_t id;
                               std::string_view t;
                               if (r.Family(&f) && r.U64(&id) && r.Str(&t) && t == trial) ++n;
                               return true;
                             })
                  .ok());
  return n;
}

void WaitForReclaims(CollectorServer* server) {
  for (int i = 0; i < 1000 && server->collector()->reclaims_pending() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server->collector()->reclaims_pending(), 0u);
}

// In process: a failure injected at one stage stops the deletion there.
TEST(DeleteCrashTest, AFailureAtEachStageLeavesTheTrialGoneAndTheOthersIntact) {
  for (const std::string stage :
       {"delete.batch", "delete.compacted", "gc.copied", "gc.indexed", "gc.dropping"}) {
    SCOPED_TRACE(stage);
    const std::string dir = MakeTempDir("delete_crash");
    ServerOptions o;
    o.store.path = dir + "/db";
    o.store.value_file_bytes = 128 << 10;  // two steps of a trial a file
    o.store.value_lanes = 1;               // every trial in every file: rewrites happen
    std::atomic<int> hits{0};
    auto fault = [stage, &hits](std::string_view at) {
      if (at != stage) return absl::OkStatus();
      ++hits;
      return absl::AbortedError(std::string("injected at ") + stage);
    };
    o.collector.fault_point = fault;
    o.store.fault_point = fault;
    std::unique_ptr<CollectorServer> server;
    std::shared_ptr<Connection> c;
    StartServer(o, &server, &c);
    Written written;
    WriteTrials(server->address(), &written);
    auto deleted = client::Trial(c, "doomed").Delete(/*wait_reclaimed=*/true);
    EXPECT_FALSE(deleted.ok());  // the reclaim stopped at the stage
    EXPECT_NE(deleted.status().message().find("injected at"), std::string::npos)
        << deleted.status();
    EXPECT_GE(hits.load(), 1);
    // Gone already; the others intact.
    EXPECT_EQ(GetReason(client::Trial(c, "doomed").Summary().status()), Reason::kTrialNotFound);
    ExpectIntact(c, written, "doomed");
    // "The crash": stop, restart without the fault.
    server.reset();
    o.collector.fault_point = nullptr;
    o.store.fault_point = nullptr;
    StartServer(o, &server, &c);
    EXPECT_EQ(GetReason(client::Trial(c, "doomed").Summary().status()), Reason::kTrialNotFound);
    ExpectIntact(c, written, "doomed");
    WaitForReclaims(server.get());
    server.reset();
    EXPECT_EQ(KeysLeft(dir + "/db", "doomed"), 0u);
    StartServer(o, &server, &c);
    ExpectIntact(c, written, "doomed");
    server.reset();
    std::filesystem::remove_all(dir);
  }
}

// The first, atomic write of a deletion fails (the disk refuses LevelDB's
// log): the trial is whole, before and after a restart.
TEST(DeleteCrashTest, AFailedDeletionWriteLeavesTheTrialWhole) {
  const std::string dir = MakeTempDir("delete_fail");
  testing::FaultEnv env(leveldb::Env::Default());
  ServerOptions o;
  o.store.path = dir + "/db";
  o.store.env = &env;
  o.store.reopen_interval_seconds = 0;
  std::unique_ptr<CollectorServer> server;
  std::shared_ptr<Connection> c;
  StartServer(o, &server, &c);
  Written written;
  WriteTrials(server->address(), &written);
  env.FailAppends(".log", 1);
  auto deleted = client::Trial(c, "doomed").Delete(true);
  EXPECT_FALSE(deleted.ok());
  EXPECT_EQ(env.appends_failed(), 1);
  ExpectIntact(c, written, "");
  server.reset();
  StartServer(o, &server, &c);
  ExpectIntact(c, written, "");
  auto steps = client::Trial(c, "doomed").Steps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->size(), static_cast<size_t>(kSteps));
  // Deleting it again works.
  ASSERT_TRUE(client::Trial(c, "doomed").Delete(true).ok());
  ExpectIntact(c, written, "doomed");
  server.reset();
  std::filesystem::remove_all(dir);
}

// Real processes: tensorkeep-server aborted at a stage (--test-abort-at), or
// killed with SIGKILL right after a deletion was answered.
class DeleteKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("delete_kill");
    if (!std::filesystem::exists(testing::ServerBinary())) {
      GTEST_SKIP() << "no server binary at " << testing::ServerBinary() << " (set TK_BIN_DIR)";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> Args(const std::string& extra = "") {
    std::vector<std::string> a = {"--listen",        "127.0.0.1:0", "--data-dir", dir_ + "/db",
                                  "--value-file-mb", "1",           "--log-level", "info",
                                  "--vlog-gc-threshold", "0.8", "--value-lanes", "1"};
    if (!extra.empty()) {
      a.push_back("--test-abort-at");
      a.push_back(extra);
    }
    return a;
  }
  // After the crash: restart, the trial is gone and the others intact.
  void ExpectRecovered(const Written& written) {
    testing::ServerProcess again;
    ASSERT_TRUE(again.Start(Args())) << again.stderr_text;
    auto c = Connection::Open(again.address);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(GetReason(client::Trial(*c, "doomed").Summary().status()), Reason::kTrialNotFound);
    ExpectIntact(*c, written, "doomed");
    // A new trial of the name starts empty.
    auto w = testing::OpenWriter(again.address, "doomed");
    ASSERT_NE(w, nullptr);
    ASSERT_TRUE(w->Write(Float32Record("fresh", 9, 4, 9)).ok());
    ASSERT_TRUE(w->EndStep(9).ok());
    ASSERT_TRUE(w->Close(true).ok());
    auto steps = client::Trial(*c, "doomed").Steps();
    ASSERT_TRUE(steps.ok());
    EXPECT_EQ(*steps, std::vector<uint64_t>{9});
    again.Signal(SIGTERM);
    again.Wait();
  }
  std::string dir_;
};

TEST_F(DeleteKillTest, AbortedAtEachStageOfTheRemovalAndTheRewrite) {
  // 1 MiB value files of 4 values of the 3 trials (--value-lanes 1): a
  // quarter or half of each is the deleted trial's, so with
  // --vlog-gc-threshold 0.8 every file with some of it is rewritten.
  for (const std::string stage : {"delete.batch", "delete.compacted", "gc.indexed", "gc.dropping"}) {
    SCOPED_TRACE(stage);
    std::filesystem::remove_all(dir_ + "/db");
    testing::ServerProcess server;
    ASSERT_TRUE(server.Start(Args(stage))) << server.stderr_text;
    Written written;
    WriteTrials(server.address, &written, 65536);  // 256 KiB values: 4 a file
    auto c = Connection::Open(server.address);
    ASSERT_TRUE(c.ok());
    auto deleted = client::Trial(*c, "doomed").Delete(true);
    EXPECT_FALSE(deleted.ok());  // the server died answering
    const int status = server.Wait();
    ASSERT_TRUE(WIFSIGNALED(status)) << server.stderr_text;
    EXPECT_EQ(WTERMSIG(status), SIGABRT);
    EXPECT_NE(server.stderr_text.find("--test-abort-at " + stage), std::string::npos);
    ExpectRecovered(written);
  }
}

TEST_F(DeleteKillTest, KilledRightAfterTheDeletionWasAnswered) {
  testing::ServerProcess server;
  ASSERT_TRUE(server.Start(Args())) << server.stderr_text;
  Written written;
  WriteTrials(server.address, &written);
  auto c = Connection::Open(server.address);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(client::Trial(*c, "doomed").Delete(/*wait_reclaimed=*/false).ok());
  server.Signal(SIGKILL);
  server.Wait();
  ExpectRecovered(written);
}

}  // namespace
}  // namespace tensorkeep
