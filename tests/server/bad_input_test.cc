// Bad input never harms what is stored, gets a clear error with the right
// status, and never crashes or wedges the server.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "base/errors.h"
#include "gmock/gmock.h"
#include "server/stored_record.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;
using ::testing::HasSubstr;

class BadInputTest : public testing::ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    good_ = Float32Record("good", 0, 16, 1);
    auto w = OpenWriter("t");
    ASSERT_TRUE(w->Write(good_).ok());
    ASSERT_TRUE(w->EndStep(0).ok());
    absl::Status closed = w->Close(false);
    ASSERT_TRUE(closed.ok()) << closed;
  }

  // Sends `messages` (seq filled in) on a fresh Push stream after an Open
  // (unless `open` is false) and returns the stream's final status.
  grpc::Status Push(std::vector<v1::PushRequest> messages, bool open = true,
                    std::string* reason = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = connection_->stub()->Push(&ctx);
    uint64_t seq = 1;
    if (open) {
      v1::PushRequest o;
      o.set_seq(seq++);
      o.mutable_open()->set_trial("t");
      o.mutable_open()->set_worker("worker_0");
      o.mutable_open()->set_num_workers(1);
      stream->Write(o);
    }
    for (auto& m : messages) {
      if (m.seq() == 0) m.set_seq(seq++);
      if (!stream->Write(m)) break;
    }
    stream->WritesDone();
    v1::PushResponse ack;
    while (stream->Read(&ack)) {
    }
    grpc::Status s = stream->Finish();
    if (reason != nullptr) {
      auto md = ctx.GetServerTrailingMetadata();
      auto it = md.find("tk-reason");
      *reason = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
    }
    return s;
  }

  static v1::PushRequest Records(std::vector<v1::TensorRecord> records) {
    v1::PushRequest m;
    for (auto& r : records) *m.mutable_records()->add_records() = std::move(r);
    return m;
  }

  // The good record is intact and nothing named `name` was stored.
  void ExpectUnharmed(const std::string& name) {
    auto t = TrialOf("t");
    auto v = t.tensor("good").GetValue(0);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->data, good_.data());
    if (!name.empty()) EXPECT_FALSE(*t.HasTensor(name)) << name << " was stored";
  }

  void ExpectRejected(v1::TensorRecord bad, const std::string& message_part) {
    const std::string name = bad.name();
    std::string reason;
    grpc::Status s =
        Push({Records({Float32Record("companion", 1, 4, 2), std::move(bad)})}, true, &reason);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_EQ(reason, "BAD_REQUEST");
    EXPECT_THAT(s.error_message(), HasSubstr(message_part));
    ExpectUnharmed(name);
    EXPECT_FALSE(*TrialOf("t").HasTensor("companion")) << "part of a bad message was stored";
  }

  v1::TensorRecord good_;
};

TEST_F(BadInputTest, RejectsBytesThatDoNotMatchDtypeTimesShape) {
  auto r = Float32Record("short", 1, 16, 3);
  r.add_shape(2);  // declares 32 elements, carries 16
  ExpectRejected(r, "short");
}

TEST_F(BadInputTest, RejectsUnknownDtype) {
  auto r = Float32Record("odd", 1, 16, 3);
  r.set_dtype(static_cast<v1::DType>(42));
  ExpectRejected(r, "unknown dtype 42");
}

TEST_F(BadInputTest, RejectsUnknownMode) {
  auto r = Float32Record("moded", 1, 16, 3);
  r.set_mode(static_cast<v1::Mode>(9));
  ExpectRejected(r, "unknown mode 9");
  auto r0 = Float32Record("moded0", 1, 16, 3);
  r0.set_mode(v1::MODE_UNSPECIFIED);
  ExpectRejected(r0, "unknown mode 0");
}

TEST_F(BadInputTest, RejectsNegativeStep) {
  auto r = Float32Record("neg", static_cast<uint64_t>(-5), 16, 3);
  ExpectRejected(r, "negative step");
}

TEST_F(BadInputTest, RejectsEmptyLongAndControlCharacterNames) {
  ExpectRejected(Float32Record("", 1, 4, 3), "tensor name is empty");
  ExpectRejected(Float32Record(std::string(300, 'n'), 1, 4, 3), "limit is 256");
  ExpectRejected(Float32Record("bad\nname", 1, 4, 3), "character");
}

TEST_F(BadInputTest, RejectsRecordsBeforeOpenAndBadTrialNames) {
  std::string reason;
  grpc::Status s = Push({Records({Float32Record("x", 1, 4, 3)})}, /*open=*/false, &reason);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("first message"));
  v1::PushRequest open;
  open.mutable_open()->set_trial("no spaces allowed");
  open.mutable_open()->set_worker("worker_0");
  open.mutable_open()->set_num_workers(1);
  s = Push({open}, false, &reason);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("trial name"));
  ExpectUnharmed("x");
}

// Issue 17: the conflict names what the worker has passed, counting the
// message itself, never a sentinel (-1 before this fix, when the message's
// own later step had committed the earlier one).
TEST_F(BadInputTest, AConflictWithinOneMessageNamesTheStepsItCommitted) {
  std::string reason;
  grpc::Status s = Push(
      {Records({Float32Record("good", 5, 16, 1), Float32Record("good", 3, 16, 7)})}, true, &reason);
  EXPECT_EQ(reason, "CONFLICT") << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("writes step 3 again"));
  EXPECT_THAT(s.error_message(), HasSubstr("every step through 4"));
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("-1")));
}

// A script re-run into a trial that ended is refused at Open, before it
// trains, with a message that names the trial and says what to do.
TEST_F(BadInputTest, ANewRunIntoAnEndedTrialIsRefusedAtOpen) {
  v1::PushRequest close;
  close.mutable_close()->set_end_of_training(true);
  ASSERT_TRUE(Push({close}).ok());
  ASSERT_TRUE(TrialOf("t").Summary()->ended());
  std::string reason;
  grpc::Status s = Push({}, true, &reason);
  EXPECT_EQ(reason, "CONFLICT") << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("trial 't' has ended"));
  EXPECT_THAT(s.error_message(), HasSubstr("new trial name"));
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("9223372036854775807")));
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("-1")));
}

// A writer whose closing stream broke after the collector applied its close
// (the acknowledgement lost) reconnects with Open.resume and resends: that is
// taken, and a resend that differs is still a conflict.
TEST_F(BadInputTest, AReconnectingWriterResendsIntoTheTrialItsOwnCloseEnded) {
  v1::PushRequest close;
  close.mutable_close()->set_end_of_training(true);
  ASSERT_TRUE(Push({close}).ok());
  ASSERT_TRUE(TrialOf("t").Summary()->ended());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = connection_->stub()->Push(&ctx);
  v1::PushRequest open;
  open.set_seq(1);
  open.mutable_open()->set_trial("t");
  open.mutable_open()->set_worker("worker_0");
  open.mutable_open()->set_num_workers(1);
  open.mutable_open()->set_resume(true);
  v1::PushRequest resend = Records({good_});
  resend.set_seq(2);
  v1::PushRequest end;
  end.set_seq(3);
  end.mutable_end_step()->set_step(0);
  close.set_seq(4);
  ASSERT_TRUE(stream->Write(open) && stream->Write(resend) && stream->Write(end) &&
              stream->Write(close));
  stream->WritesDone();
  v1::PushResponse ack;
  uint64_t acked = 0;
  while (stream->Read(&ack)) acked = ack.acked_seq();
  grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(acked, 4u);
  ExpectUnharmed("");
  std::string reason;
  auto changed = Float32Record("good", 0, 16, 99);
  // (Push() opens without resume: refused at Open, as a new run.)
  EXPECT_EQ(Push({Records({changed})}, true, &reason).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(reason, "CONFLICT");
  ExpectUnharmed("");
}

TEST_F(BadInputTest, RejectsRewritingACommittedStepWithOtherDataButAcceptsAnIdenticalResend) {
  auto changed = Float32Record("good", 0, 16, 99);
  std::string reason;
  grpc::Status s = Push({Records({changed})}, true, &reason);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
  EXPECT_EQ(reason, "CONFLICT");
  EXPECT_THAT(s.error_message(), HasSubstr("writes step 0 again"));
  EXPECT_THAT(s.error_message(), HasSubstr("through 0"));
  EXPECT_THAT(s.error_message(), HasSubstr("new trial name"));
  ExpectUnharmed("");
  // A writer resending what it already wrote (after a reconnect) is fine.
  v1::PushRequest close;
  close.mutable_close();
  s = Push({Records({good_}), close}, true, &reason);
  EXPECT_TRUE(s.ok()) << s.error_message();
  ExpectUnharmed("");
}

TEST_F(BadInputTest, ALargeValueResentIsComparedWithWhatIsStoredAndADifferingOneIsAConflict) {
  // Large values (in the value log) are compared by their stored checksum.
  const auto big = Float32Record("big", 1, 200000, 5);
  ASSERT_GT(big.data().size(), kMaxInlineValueBytes);
  v1::PushRequest end1;
  end1.mutable_end_step()->set_step(1);
  v1::PushRequest close;
  close.mutable_close();
  std::string reason;
  grpc::Status s = Push({Records({good_}), Records({big}), end1, close}, true, &reason);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = Push({Records({big}), close}, true, &reason);
  EXPECT_TRUE(s.ok()) << "an identical resend of a large value: " << s.error_message();
  auto changed = big;
  (*changed.mutable_data())[123456] ^= 1;  // one bit
  s = Push({Records({changed})}, true, &reason);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
  EXPECT_EQ(reason, "CONFLICT");
  EXPECT_THAT(s.error_message(), HasSubstr("differs from what is stored"));
  auto v = TrialOf("t").tensor("big").GetValue(1);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->data == big.data()) << "the stored value was changed";
}

TEST_F(BadInputTest, AStreamThatDiesMidTensorStoresNothingOfIt) {
  {
    grpc::ClientContext ctx;
    auto stream = connection_->stub()->Push(&ctx);
    v1::PushRequest o;
    o.set_seq(1);
    o.mutable_open()->set_trial("t");
    o.mutable_open()->set_worker("worker_1");
    o.mutable_open()->set_num_workers(1);
    ASSERT_TRUE(stream->Write(o));
    auto r = Float32Record("partial", 1, 1000, 4);
    r.set_value_size(r.data().size());
    r.mutable_data()->resize(1000);  // 1000 of 4000 bytes; chunks would follow
    v1::PushRequest m = Records({r});
    m.set_seq(2);
    ASSERT_TRUE(stream->Write(m));
    v1::PushRequest flush;
    flush.set_seq(3);
    flush.mutable_flush();
    ctx.TryCancel();  // the writer dies
    (void)stream->Finish();
  }
  ExpectUnharmed("partial");
  // The server still takes new writes. A new writer for the same worker is
  // refused (CONFLICT) while the collector has not yet seen the cancelled
  // stream end: wait for that (bounded), as a restarted job's rank would.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (bool connected = true; connected;) {
    auto statuses = TrialOf("t").WorkerStatuses();
    ASSERT_TRUE(statuses.ok()) << statuses.status();
    connected = false;
    for (const auto& s : *statuses) connected |= s.worker() == "worker_1" && s.connected();
    if (!connected) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "worker_1's cancelled stream never ended";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto w = OpenWriter("t", "worker_1");
  ASSERT_TRUE(w->Write(Float32Record("after", 1, 4, 5)).ok());
  ASSERT_TRUE(w->Flush().ok());
  EXPECT_TRUE(*TrialOf("t").HasTensor("after"));
}

TEST_F(BadInputTest, ChunksThatOverflowTheDeclaredSizeAreRejected) {
  auto r = Float32Record("chunky", 1, 100, 4);
  const std::string all = r.data();
  r.set_value_size(all.size());
  r.set_data(all.substr(0, 100));
  v1::PushRequest chunk;
  chunk.mutable_chunk()->set_data(std::string(all.size(), 'x'));
  grpc::Status s = Push({Records({r}), chunk});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("exceed"));
  ExpectUnharmed("chunky");
}

TEST_F(BadInputTest, OversizedMessagesAreRefusedByTheTransport) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.store.path = dir_ + "/small";
  o.max_message_bytes = 1 << 20;
  auto small = CollectorServer::Start(o);
  ASSERT_TRUE(small.ok());
  auto c = Connection::Open((*small)->address());
  grpc::ClientContext ctx;
  auto stream = (*c)->stub()->Push(&ctx);
  v1::PushRequest open;
  open.set_seq(1);
  open.mutable_open()->set_trial("t");
  open.mutable_open()->set_worker("w");
  open.mutable_open()->set_num_workers(1);
  stream->Write(open);
  v1::PushRequest big = Records({Float32Record("big", 0, 1 << 20, 1)});  // 4 MiB
  big.set_seq(2);
  stream->Write(big);
  stream->WritesDone();
  v1::PushResponse ack;
  while (stream->Read(&ack)) {
  }
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  // Still serving.
  client::Trial t(*c, "t");
  EXPECT_TRUE(t.Steps().ok() || GetReason(t.Steps().status()) == Reason::kTrialNotFound);
}

TEST_F(BadInputTest, ASecondCollectorOnTheSamePortIsRefused) {
  // Without this, gRPC's SO_REUSEPORT let two collectors with different data
  // directories share a port and split the clients between them.
  ServerOptions o;
  o.listen = absl::StrCat("127.0.0.1:", server_->port());
  o.store.path = dir_ + "/second";
  auto second = CollectorServer::Start(o);
  ASSERT_FALSE(second.ok()) << "a second collector started on port " << server_->port();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen on 127.0.0.1:"));
  ExpectUnharmed("");
}

TEST_F(BadInputTest, GarbageOnThePortDoesNotHurtTheServer) {
  const int port = server_->port();
  for (int i = 0; i < 5; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string junk = i % 2 == 0 ? "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
                                  : std::string(4096, static_cast<char>(0x80 + i));
    (void)!write(fd, junk.data(), junk.size());
    close(fd);
  }
  ExpectUnharmed("");
}

TEST_F(BadInputTest, QueriesWithBadArgumentsFailClearly) {
  auto t = TrialOf("t");
  v1::ListStepsRequest r;
  r.set_trial("t");
  r.set_mode(static_cast<v1::Mode>(17));
  grpc::ClientContext ctx;
  v1::StepList out;
  grpc::Status s = connection_->stub()->ListSteps(&ctx, r, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("unknown mode 17"));
  v1::RuleStatus rs;
  rs.set_rule("r");
  rs.set_state(v1::RuleStatus::ISSUES_FOUND);
  rs.set_action("explode");
  EXPECT_EQ(GetReason(t.ReportRuleStatus(rs)), Reason::kBadRequest);
  ExpectUnharmed("");
}

}  // namespace
}  // namespace tensorkeep
