// DeleteTrial and retention against an in-process collector: what readers,
// waiters, watchers and writers of a deleted trial see, that nothing of the
// other trials changes (bit for bit, also after a restart), that the name is
// free again, that MAX_TRIALS counts only live trials, that the space comes
// back, and that --retain-days deletes ended trials once they are old enough
// (an injected clock: the test does not sleep days).
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/errors.h"
#include "gtest/gtest.h"
#include "storage/keys.h"
#include "storage/leveldb_tensor_store.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;
using testing::MakeTempDir;
using testing::OpenWriter;
using testing::StartServer;

constexpr int kSteps = 4;
constexpr int kLargeFloats = 16384;  // 64 KiB: in the value log
constexpr int kSmallFloats = 8;      // inline in its record block

// (trial, tensor, step) -> the bytes written.
using Written = std::map<std::tuple<std::string, std::string, uint64_t>, std::string>;

// Writes kSteps steps of a large and a small tensor to `trial` (seeds from
// `seed`) and closes with end-of-training when `end`.
void WriteTrial(const std::string& address, const std::string& trial, uint32_t seed,
                Written* written, bool end = true) {
  auto w = OpenWriter(address, trial);
  ASSERT_NE(w, nullptr);
  for (int step = 0; step < kSteps; ++step) {
    for (const auto& [name, n] : {std::pair<std::string, int>{"big", kLargeFloats},
                                  std::pair<std::string, int>{"small", kSmallFloats}}) {
      v1::TensorRecord r = Float32Record(name, step, n, seed * 1000 + step * 10 + n);
      (*written)[{trial, name, static_cast<uint64_t>(step)}] = r.data();
      ASSERT_TRUE(w->Write(std::move(r)).ok());
    }
    ASSERT_TRUE(w->EndStep(step).ok());
  }
  ASSERT_TRUE(w->Close(end).ok());
}

// Every value of `written` for trials other than `except` reads back bit
// for bit.
void ExpectIntact(const std::shared_ptr<Connection>& c, const Written& written,
                  const std::string& except) {
  int checked = 0;
  for (const auto& [where, bytes] : written) {
    const auto& [trial, name, step] = where;
    if (trial == except) continue;
    SCOPED_TRACE(trial + "/" + name + "/" + std::to_string(step));
    auto v = client::Tensor(c, trial, name).GetValue(step);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(v->data == bytes);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

void ExpectNotFound(const absl::Status& s) {
  EXPECT_EQ(GetReason(s), Reason::kTrialNotFound) << s;
}

class DeleteTrialTest : public testing::ServerFixture {
 protected:
  void WriteThree() {
    for (const auto& [trial, seed] : {std::pair<std::string, uint32_t>{"keep-a", 1},
                                      std::pair<std::string, uint32_t>{"doomed", 2},
                                      std::pair<std::string, uint32_t>{"keep-c", 3}}) {
      WriteTrial(server_->address(), trial, seed, &written_);
    }
  }
  Written written_;
};

TEST_F(DeleteTrialTest, ReadersGetTrialNotFoundAndOtherTrialsStayBitForBit) {
  WriteThree();
  auto deleted = TrialOf("doomed").Delete(/*wait_reclaimed=*/true);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->trial(), "doomed");
  EXPECT_EQ(deleted->deleted_by(), "anonymous");
  EXPECT_EQ(deleted->steps(), static_cast<uint64_t>(kSteps));
  EXPECT_EQ(deleted->workers(), 1u);
  EXPECT_EQ(deleted->tensor_names(), 2u);
  EXPECT_TRUE(deleted->reclaimed());
  // Its large values: kSteps x 64 KiB became value-log garbage.
  EXPECT_EQ(deleted->value_bytes(), uint64_t{kSteps} * kLargeFloats * 4);
  EXPECT_GT(deleted->index_bytes(), 0u);

  // Every read names the trial as not found, as for a trial never written.
  ExpectNotFound(TrialOf("doomed").Summary().status());
  ExpectNotFound(TrialOf("doomed").Steps().status());
  ExpectNotFound(TrialOf("doomed").TensorNames().status());
  ExpectNotFound(client::Tensor(connection_, "doomed", "big").GetValue(0).status());
  ExpectNotFound(TrialOf("doomed").WaitForSteps({0}, client::kGlobal, 5));
  // A second delete finds nothing.
  ExpectNotFound(TrialOf("doomed").Delete().status());
  ExpectIntact(connection_, written_, "doomed");

  // Nothing of it comes back after a restart; the others are intact.
  Restart();
  ExpectNotFound(TrialOf("doomed").Summary().status());
  ExpectIntact(connection_, written_, "doomed");
  v1::ListTrialsResponse list;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(connection_->stub()->ListTrials(&ctx, v1::ListTrialsRequest(), &list).ok());
  }
  std::vector<std::string> names;
  for (const auto& t : list.trials()) names.push_back(t.name());
  EXPECT_EQ(names, (std::vector<std::string>{"keep-a", "keep-c"}));
}

TEST_F(DeleteTrialTest, TheNameIsFreeAfterwardsAndANewTrialStartsEmpty) {
  WriteThree();
  ASSERT_TRUE(TrialOf("doomed").Delete(/*wait_reclaimed=*/false).ok());
  // Written again at once, while the old one's data may still be removed.
  Written again;
  {
    auto w = OpenWriter("doomed");
    ASSERT_NE(w, nullptr);
    v1::TensorRecord r = Float32Record("fresh", 7, kLargeFloats, 99);
    again[{"doomed", "fresh", 7}] = r.data();
    ASSERT_TRUE(w->Write(std::move(r)).ok());
    ASSERT_TRUE(w->EndStep(7).ok());
    ASSERT_TRUE(w->Close(true).ok());
  }
  // Let the old one's removal finish, then check across a restart.
  for (int i = 0; i < 500 && server_->collector()->reclaims_pending() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->collector()->reclaims_pending(), 0u);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "before restart" : "after restart");
    auto steps = TrialOf("doomed").Steps();
    ASSERT_TRUE(steps.ok()) << steps.status();
    EXPECT_EQ(*steps, std::vector<uint64_t>{7});
    auto names = TrialOf("doomed").TensorNames();
    ASSERT_TRUE(names.ok());
    EXPECT_EQ(*names, std::vector<std::string>{"fresh"});
    ExpectIntact(connection_, again, "");
    ExpectIntact(connection_, written_, "doomed");
    Restart();
  }
}

TEST_F(DeleteTrialTest, LiveWaitsAndWatchesEndWithTrialNotFound) {
  auto w = OpenWriter("doomed");
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->Write(Float32Record("x", 0, 4, 1)).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  ASSERT_TRUE(w->Flush().ok());
  // A wait for a step that never comes, and a watch past the last step.
  auto wait = std::async(std::launch::async, [&] {
    return TrialOf("doomed").WaitForSteps({50}, client::kGlobal, 60);
  });
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchStepsRequest watch_req;
  watch_req.set_trial("doomed");
  watch_req.set_from_step(1);
  auto watch = connection_->stub()->WatchSteps(&watch_ctx, watch_req);
  // Both are registered before the delete (bounded wait on the watcher count).
  auto trial = server_->collector()->GetTrial("doomed");
  ASSERT_TRUE(trial.ok());
  for (int i = 0; i < 500 && (*trial)->watchers() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ((*trial)->watchers(), 2u);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(TrialOf("doomed").Delete(false).ok());
  ASSERT_EQ(wait.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ExpectNotFound(wait.get());
  v1::StepEvent event;
  EXPECT_FALSE(watch->Read(&event));
  const grpc::Status watched = watch->Finish();
  EXPECT_EQ(watched.error_code(), grpc::StatusCode::NOT_FOUND) << watched.error_message();
  EXPECT_NE(watched.error_message().find("deleted by anonymous"), std::string::npos)
      << watched.error_message();
  // Ended by the deletion, not by their 60 s limits.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST_F(DeleteTrialTest, AWriterStillPushingGetsAClearError) {
  auto w = OpenWriter("doomed");
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->Write(Float32Record("x", 0, kLargeFloats, 1)).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  ASSERT_TRUE(w->Flush().ok());
  ASSERT_TRUE(TrialOf("doomed").Delete(false).ok());
  // The writer goes on; its next flush fails, naming the deletion.
  absl::Status s;
  for (int step = 1; step < 50 && s.ok(); ++step) {
    s = w->Write(Float32Record("x", step, kLargeFloats, step));
    if (s.ok()) s = w->EndStep(step);
    if (s.ok()) s = w->Flush();
  }
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("trial 'doomed' was deleted by anonymous at "), std::string::npos)
      << s;
  (void)w->Close(false);
  // Nothing it sent after the deletion was stored under the name.
  ExpectNotFound(TrialOf("doomed").Summary().status());
}

TEST(DeleteTrialLimits, DeletedTrialsNoLongerCountAgainstMaxTrials) {
  const std::string dir = MakeTempDir("delete_max");
  ServerOptions o;
  o.store.path = dir + "/db";
  o.collector.max_trials = 2;
  std::unique_ptr<CollectorServer> server;
  std::shared_ptr<Connection> c;
  StartServer(o, &server, &c);
  Written written;
  WriteTrial(server->address(), "one", 1, &written);
  WriteTrial(server->address(), "two", 2, &written);
  {
    client::WriterOptions wo;
    wo.server = server->address();
    wo.trial = "three";
    auto w = client::Writer::Open(wo);
    absl::Status s = w.ok() ? (*w)->Write(Float32Record("x", 0, 4, 1)) : w.status();
    if (s.ok() && w.ok()) s = (*w)->Flush();
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  }
  ASSERT_TRUE(client::Trial(c, "one").Delete(false).ok());
  WriteTrial(server->address(), "three", 3, &written);
  ExpectIntact(c, written, "one");
  server.reset();
  std::filesystem::remove_all(dir);
}

TEST(DeleteTrialSpace, TheValueLogGivesTheDeletedBytesBack) {
  const std::string dir = MakeTempDir("delete_space");
  ServerOptions o;
  o.store.path = dir + "/db";
  o.store.value_file_bytes = 256 << 10;  // a few steps a file
  std::unique_ptr<CollectorServer> server;
  std::shared_ptr<Connection> c;
  StartServer(o, &server, &c);
  Written written;
  WriteTrial(server->address(), "stays", 1, &written);
  WriteTrial(server->address(), "goes", 2, &written);
  const auto values_bytes = [&] {
    uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/db/" + kValuesSubdir)) {
      total += e.file_size();
    }
    return total;
  };
  const uint64_t before = values_bytes();
  auto deleted = client::Trial(c, "goes").Delete(true);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  const uint64_t after = values_bytes();
  const uint64_t goes_bytes = uint64_t{kSteps} * kLargeFloats * 4;
  EXPECT_EQ(deleted->value_bytes(), goes_bytes);
  // Every value file that held only its values is gone.
  EXPECT_GE(before - after, goes_bytes * 9 / 10) << before << " -> " << after;
  EXPECT_GE(deleted->value_files_freed_bytes(), goes_bytes * 9 / 10);
  ExpectIntact(c, written, "goes");
  server.reset();
  std::filesystem::remove_all(dir);
}

TEST(DeleteTrialRetention, EndedTrialsOlderThanRetainDaysAreDeleted) {
  const std::string dir = MakeTempDir("retention");
  // The collector's clock runs `offset` ahead of the system's (end times are
  // stamped by the system clock).
  std::atomic<double> offset{0};
  struct Ahead {
    std::atomic<double>* offset;
    double load() const {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                 .count() +
             offset->load();
    }
  };
  ServerOptions o;
  o.store.path = dir + "/db";
  o.collector.retain_days = 2;
  o.collector.retention_sweep_seconds = 0.02;
  o.collector.clock = [&offset] { return Ahead{&offset}.load(); };
  std::unique_ptr<CollectorServer> server;
  std::shared_ptr<Connection> c;
  StartServer(o, &server, &c);
  Written written;
  WriteTrial(server->address(), "old-ended", 1, &written, /*end=*/true);
  WriteTrial(server->address(), "still-running", 2, &written, /*end=*/false);
  offset = offset.load() + 86400;  // one day: nothing expires
  for (int i = 0; i < 20; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(client::Trial(c, "old-ended").Summary().ok());
  WriteTrial(server->address(), "young-ended", 3, &written, /*end=*/true);
  offset = offset.load() + 1.5 * 86400;  // old-ended: 2.5 days; young-ended: 1.5
  absl::Status gone;
  for (int i = 0; i < 500; ++i) {
    gone = client::Trial(c, "old-ended").Summary().status();
    if (!gone.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ExpectNotFound(gone);
  EXPECT_TRUE(client::Trial(c, "young-ended").Summary().ok());
  EXPECT_TRUE(client::Trial(c, "still-running").Summary().ok());
  ExpectIntact(c, written, "old-ended");
  offset = offset.load() + 86400;  // young-ended: 2.5 days
  for (int i = 0; i < 500; ++i) {
    gone = client::Trial(c, "young-ended").Summary().status();
    if (!gone.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ExpectNotFound(gone);
  EXPECT_TRUE(client::Trial(c, "still-running").Summary().ok());
  server.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensorkeep
