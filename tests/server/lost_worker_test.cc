// Lost workers against real processes (issue 13): a worker process killed
// with SIGKILL is LOST after --worker-timeout and later steps complete
// without it; `tensorkeep worker-lost` does it at once; a LOST worker that
// reconnects is ACTIVE again; a trial whose workers are all CLOSED or LOST
// ends; states survive a restart of the collector, and workers ACTIVE at the
// restart get a fresh timeout; an Open with another num_workers is refused.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/errors.h"
#include "client/trial.h"
#include "client/writer.h"
#include "gmock/gmock.h"
#include "tests/server/child_argv.h"
#include "tests/server/server_process.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ServerProcess;

std::string Bin(const std::string& name) {
  const char* dir = std::getenv("TK_BIN_DIR");
  return std::string(dir != nullptr ? dir : "build/bin") + "/" + name;
}

// A step_writer process (tests/server/step_writer_main.cc).
class WorkerProcess {
 public:
  // Starts it and waits for its "flushed" line; false if it failed first.
  bool Start(const std::vector<std::string>& args) {
    const testing::ChildArgv child(Bin("step_writer"), args);  // before fork()
    int out[2];
    if (pipe(out) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      execv(child.path(), child.argv());
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[128];
    const bool ok =
        std::fgets(line, sizeof(line), f) != nullptr && std::string(line).rfind("flushed", 0) == 0;
    fclose(f);
    return ok;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Waits for a process that exits by itself; its exit code.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~WorkerProcess() { Kill(); }

 private:
  pid_t pid_ = -1;
};

// Runs the tensorkeep CLI; its exit code, stdout and stderr together in *out.
int RunCli(const std::vector<std::string>& args, std::string* out) {
  std::string cmd = Bin("tensorkeep");
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[512];
  out->clear();
  while (std::fgets(buf, sizeof(buf), p) != nullptr) *out += buf;
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

v1::TensorRecord Scalar(uint64_t step) {
  v1::TensorRecord r;
  r.set_name("w");
  r.set_step(step);
  r.set_mode(v1::TRAIN);
  r.set_mode_step(step);
  r.set_dtype(v1::FLOAT32);
  r.add_shape(1);
  r.set_has_value(true);
  const float v = static_cast<float>(step);
  r.set_data(std::string(reinterpret_cast<const char*>(&v), sizeof(v)));
  return r;
}

class LostWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("lost_worker"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void StartServer(double worker_timeout) {
    server_ = std::make_unique<ServerProcess>();
    ASSERT_TRUE(
        server_->Start({"--listen", "127.0.0.1:0", "--data-dir", dir_ + "/db", "--log-level",
                        "warn", "--worker-timeout", std::to_string(worker_timeout)}))
        << server_->stderr_text;
    auto c = Connection::Open(server_->address);
    ASSERT_TRUE(c.ok()) << c.status();
    connection_ = *c;
  }
  client::Trial Trial(const std::string& name) { return client::Trial(connection_, name); }
  std::vector<std::string> WorkerArgs(const std::string& trial, const std::string& worker,
                                      int num_workers, int first, int last,
                                      const std::string& then = "hold") {
    return {server_->address,     trial, worker, std::to_string(num_workers), std::to_string(first),
            std::to_string(last), then};
  }
  std::unique_ptr<client::Writer> OpenWriter(const std::string& trial, const std::string& worker,
                                             uint32_t num_workers) {
    return testing::OpenWriter(server_->address, trial, worker, num_workers);
  }
  static void WriteSteps(client::Writer* w, int first, int last) {
    for (int s = first; s <= last; ++s) {
      ASSERT_TRUE(w->Write(Scalar(s)).ok());
      ASSERT_TRUE(w->EndStep(s).ok());
    }
    ASSERT_TRUE(w->Flush().ok());
  }
  // The status of `worker` in `trial`.
  v1::WorkerStatus StatusOf(const std::string& trial, const std::string& worker) {
    auto all = Trial(trial).WorkerStatuses();
    EXPECT_TRUE(all.ok()) << all.status();
    if (all.ok()) {
      for (const auto& s : *all) {
        if (s.worker() == worker) return s;
      }
    }
    ADD_FAILURE() << "no worker " << worker;
    return {};
  }
  // Polls (bounded: 15 s) until `worker` is in `state`.
  bool AwaitState(const std::string& trial, const std::string& worker, v1::WorkerState state) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      if (StatusOf(trial, worker).state() == state) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // The first event of WatchSteps from `step`.
  v1::StepEvent WatchOne(const std::string& trial, uint64_t step) {
    grpc::ClientContext cc;
    cc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::WatchStepsRequest req;
    req.set_trial(trial);
    req.set_from_step(step);
    auto reader = connection_->stub()->WatchSteps(&cc, req);
    v1::StepEvent ev;
    EXPECT_TRUE(reader->Read(&ev));
    cc.TryCancel();
    return ev;
  }

  std::string dir_;
  std::unique_ptr<ServerProcess> server_;
  std::shared_ptr<Connection> connection_;
};

TEST_F(LostWorkerTest, KilledWorkerIsLostAfterTimeoutAndComesBack) {
  StartServer(/*worker_timeout=*/2);
  WorkerProcess rank1;
  ASSERT_TRUE(rank1.Start(WorkerArgs("t", "worker_1", 2, 0, 2)));
  auto rank0 = OpenWriter("t", "worker_0", 2);
  ASSERT_NE(rank0, nullptr);
  WriteSteps(rank0.get(), 0, 5);
  auto trial = Trial("t");
  // smdebug's rule while both are ACTIVE: a step is complete when both ended it.
  EXPECT_EQ(*trial.HasPassedStep(2), client::StepState::kAvailable);
  EXPECT_EQ(*trial.HasPassedStep(3), client::StepState::kNotYetAvailable);
  EXPECT_EQ(StatusOf("t", "worker_1").state(), v1::ACTIVE);
  EXPECT_TRUE(StatusOf("t", "worker_1").connected());

  const auto killed = std::chrono::steady_clock::now();
  rank1.Kill();
  // Not lost at once: within the timeout it could come back.
  EXPECT_EQ(StatusOf("t", "worker_1").state(), v1::ACTIVE);
  EXPECT_EQ(*trial.HasPassedStep(5), client::StepState::kNotYetAvailable);
  // After the timeout the waiter is woken and the steps complete without it.
  ASSERT_TRUE(trial.WaitForSteps({3, 4, 5}, client::kGlobal, 20).ok());
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_GE(waited, 1.5);
  const v1::WorkerStatus lost = StatusOf("t", "worker_1");
  EXPECT_EQ(lost.state(), v1::LOST);
  EXPECT_EQ(lost.last_step(), 2);
  EXPECT_EQ(lost.committed_through(), 2);
  EXPECT_FALSE(lost.connected());
  EXPECT_THAT(lost.reason(), HasSubstr("worker-timeout"));
  EXPECT_GT(lost.since_unix(), 0);
  EXPECT_EQ(StatusOf("t", "worker_0").state(), v1::ACTIVE);
  // A step's record says which workers it has, and which are lost.
  const v1::StepEvent ev = WatchOne("t", 4);
  EXPECT_EQ(ev.step(), 4u);
  EXPECT_THAT(ev.workers(), ElementsAre("worker_0"));
  EXPECT_THAT(ev.lost_workers(), ElementsAre("worker_1"));
  auto summary = trial.Summary();
  ASSERT_TRUE(summary.ok());
  EXPECT_FALSE(summary->ended());
  ASSERT_EQ(summary->worker_statuses_size(), 2);
  EXPECT_EQ(summary->worker_statuses(1).state(), v1::LOST);

  // It comes back (a relaunched rank) and writes steps 3..7, of which 3..5
  // completed without it: they are kept, and it is ACTIVE again.
  WorkerProcess again;
  ASSERT_TRUE(again.Start(WorkerArgs("t", "worker_1", 2, 3, 7)));
  EXPECT_EQ(StatusOf("t", "worker_1").state(), v1::ACTIVE);
  auto workers = trial.tensor("w").Workers(4);
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_THAT(*workers, ElementsAre("worker_0", "worker_1"));
  // Steps are complete only when it committed them again.
  WriteSteps(rank0.get(), 6, 8);
  EXPECT_EQ(*trial.HasPassedStep(7), client::StepState::kAvailable);
  EXPECT_EQ(*trial.HasPassedStep(8), client::StepState::kNotYetAvailable);

  // One worker closes with end-of-training, the other dies: the trial ends
  // once the dead one is LOST.
  ASSERT_TRUE(rank0->Close(/*end_of_training=*/true).ok());
  EXPECT_FALSE(trial.Summary()->ended());
  again.Kill();
  absl::Status beyond = trial.WaitForSteps({100}, client::kGlobal, 20);
  EXPECT_EQ(GetReason(beyond), Reason::kNoMoreData) << beyond;
  EXPECT_TRUE(trial.Summary()->ended());
  EXPECT_EQ(*trial.HasPassedStep(8), client::StepState::kAvailable);
  EXPECT_EQ(StatusOf("t", "worker_0").state(), v1::CLOSED);
  EXPECT_EQ(StatusOf("t", "worker_1").state(), v1::LOST);
}

TEST_F(LostWorkerTest, WorkerLostFromTheCliActsAtOnce) {
  StartServer(/*worker_timeout=*/600);
  WorkerProcess rank1;
  ASSERT_TRUE(rank1.Start(WorkerArgs("t", "worker_1", 2, 0, 1)));
  auto rank0 = OpenWriter("t", "worker_0", 2);
  ASSERT_NE(rank0, nullptr);
  WriteSteps(rank0.get(), 0, 3);
  rank1.Kill();
  auto trial = Trial("t");
  EXPECT_EQ(*trial.HasPassedStep(3), client::StepState::kNotYetAvailable);

  std::string out;
  ASSERT_EQ(RunCli({"--server", server_->address, "worker-lost", "t", "worker_1"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("LOST"));
  // Far sooner than the 600 s timeout.
  ASSERT_TRUE(trial.WaitForSteps({3}, client::kGlobal, 10).ok());
  ASSERT_EQ(RunCli({"--server", server_->address, "workers", "t"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("worker_1"));
  EXPECT_THAT(out, HasSubstr("LOST"));
  EXPECT_THAT(out, HasSubstr("declared lost"));
  ASSERT_EQ(RunCli({"--server", server_->address, "info", "t"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("worker_1(LOST, last step 1)"));
  EXPECT_THAT(out, HasSubstr("worker_0(ACTIVE, last step 3)"));

  // Declaring it again changes nothing; an unknown worker is refused.
  ASSERT_EQ(RunCli({"--server", server_->address, "worker-lost", "t", "worker_1"}, &out), 0) << out;
  EXPECT_EQ(RunCli({"--server", server_->address, "worker-lost", "t", "worker_9"}, &out), 1);
  EXPECT_THAT(out, HasSubstr("INVALID_WORKER"));
  // A CLOSED worker is not lost.
  ASSERT_TRUE(rank0->Close(/*end_of_training=*/true).ok());
  EXPECT_TRUE(trial.Summary()->ended());  // CLOSED + LOST: ended
  auto refused = trial.DeclareWorkerLost("worker_0");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
}

TEST_F(LostWorkerTest, RestartKeepsStatesAndGivesActiveWorkersAFreshTimeout) {
  StartServer(/*worker_timeout=*/2);
  {
    WorkerProcess w0, w1, w2;
    ASSERT_TRUE(w0.Start(WorkerArgs("t", "worker_0", 3, 0, 2)));
    ASSERT_TRUE(w1.Start(WorkerArgs("t", "worker_1", 3, 0, 2)));
    ASSERT_TRUE(w2.Start(WorkerArgs("t", "worker_2", 3, 0, 1)));
    w2.Kill();
    ASSERT_TRUE(AwaitState("t", "worker_2", v1::LOST));
    ASSERT_TRUE(Trial("t").WaitForSteps({2}, client::kGlobal, 10).ok());
    connection_.reset();
    server_->Signal(SIGTERM);
    server_->Wait();
  }  // the writers, cut off, are killed
  StartServer(/*worker_timeout=*/2);
  // Right after the restart: the LOST worker is still LOST, the others are
  // ACTIVE (not wrongly lost) though not connected.
  EXPECT_EQ(StatusOf("t", "worker_2").state(), v1::LOST);
  EXPECT_EQ(StatusOf("t", "worker_0").state(), v1::ACTIVE);
  EXPECT_EQ(StatusOf("t", "worker_1").state(), v1::ACTIVE);
  EXPECT_EQ(*Trial("t").HasPassedStep(2), client::StepState::kAvailable);
  // worker_0 reconnects within the timeout and stays ACTIVE; worker_1 does
  // not and is lost (the restarted collector does not wait forever).
  WorkerProcess back;
  ASSERT_TRUE(back.Start(WorkerArgs("t", "worker_0", 3, 3, 4)));
  ASSERT_TRUE(AwaitState("t", "worker_1", v1::LOST));
  ASSERT_TRUE(Trial("t").WaitForSteps({4}, client::kGlobal, 10).ok());
  EXPECT_EQ(StatusOf("t", "worker_0").state(), v1::ACTIVE);
  EXPECT_TRUE(StatusOf("t", "worker_0").connected());
  EXPECT_FALSE(Trial("t").Summary()->ended());
}

TEST_F(LostWorkerTest, OpenWithAnotherNumWorkersIsRefused) {
  StartServer(/*worker_timeout=*/60);
  auto rank0 = OpenWriter("t", "worker_0", 2);
  ASSERT_NE(rank0, nullptr);
  WriteSteps(rank0.get(), 0, 0);
  client::WriterOptions o;
  o.server = server_->address;
  o.trial = "t";
  o.worker = "worker_1";
  o.num_workers = 3;
  absl::Status s;
  auto w = client::Writer::Open(o);
  if (!w.ok()) {
    s = w.status();
  } else {
    s = (*w)->Write(Scalar(0));
    if (s.ok()) s = (*w)->Flush();
  }
  EXPECT_EQ(GetReason(s), Reason::kConflict) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("num_workers 3"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("num_workers 2"));
  // Nothing of the refused writer counts: the trial still has one worker.
  EXPECT_THAT(*Trial("t").Workers(), ElementsAre("worker_0"));
  // The same count is accepted.
  auto rank1 = OpenWriter("t", "worker_1", 2);
  ASSERT_NE(rank1, nullptr);
  WriteSteps(rank1.get(), 0, 0);
  EXPECT_EQ(*Trial("t").HasPassedStep(0), client::StepState::kAvailable);
}

}  // namespace
}  // namespace tensorkeep
