// Requests a client can send to freeze or confuse the collector, answered on
// the wire: errors that quote huge input stay short and keep their reason
// (gRPC carries the message in trailing metadata, whose size is limited),
// and WaitForSteps timeouts that would overflow the clock.
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "proto/limits.pb.h"
#include "server/grpc_status.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

struct Reply {
  grpc::Status status;
  std::string reason;  // tk-reason, "" if none
  double seconds = 0;
};

class HostileRequestTest : public testing::ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    auto w = OpenWriter("t");
    ASSERT_TRUE(w->Write(Float32Record("x", 0, 16, 1)).ok());
    ASSERT_TRUE(w->EndStep(0).ok());
    ASSERT_TRUE(w->Close(false).ok());
  }

  // Calls `method` of the stub with `request` and a 30 s (or `deadline`) deadline.
  template <typename Req, typename Resp, typename Method>
  Reply Call(Method method, const Req& request,
             std::chrono::milliseconds deadline = std::chrono::milliseconds(30000)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    Resp response;
    const auto start = Clock::now();
    Reply r;
    r.status = (connection_->stub()->*method)(&ctx, request, &response);
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const auto& md = ctx.GetServerTrailingMetadata();
    auto it = md.find("tk-reason");
    if (it != md.end()) r.reason.assign(it->second.data(), it->second.size());
    return r;
  }

  static void ExpectShortBadRequest(const Reply& r, const std::string& message_part) {
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << r.status.error_message().substr(0, 300);
    EXPECT_EQ(r.reason, "BAD_REQUEST");
    EXPECT_THAT(r.status.error_message(), HasSubstr(message_part));
    EXPECT_LT(r.status.error_message().size(), 600u);
  }

  Reply Wait(uint64_t step, double timeout_seconds, std::chrono::milliseconds deadline) {
    v1::WaitForStepsRequest req;
    req.set_trial("t");
    req.add_steps(step);
    req.set_timeout_seconds(timeout_seconds);
    return Call<v1::WaitForStepsRequest, v1::WaitForStepsResponse>(
        &v1::TensorKeep::Stub::WaitForSteps, req, deadline);
  }
};

TEST_F(HostileRequestTest, HugeReductionNameIsABadRequestWithAShortMessage) {
  v1::ReductionsRequest req;
  req.mutable_tensor()->set_trial("t");
  req.mutable_tensor()->set_tensor("x");
  req.add_reductions()->set_name(std::string(1 << 20, 'r'));
  Reply r = Call<v1::ReductionsRequest, v1::ReductionsResponse>(
      &v1::TensorKeep::Stub::GetReductions, req);
  ExpectShortBadRequest(r, "(1048576 bytes) is too long");
  // Within the length limit, an unknown name is quoted whole.
  req.mutable_reductions(0)->set_name("median");
  r = Call<v1::ReductionsRequest, v1::ReductionsResponse>(&v1::TensorKeep::Stub::GetReductions,
                                                          req);
  ExpectShortBadRequest(r, "unknown reduction 'median'");
}

TEST_F(HostileRequestTest, HugeRuleActionIsABadRequestWithAShortMessage) {
  v1::RuleStatus req;
  req.set_trial("t");
  req.set_rule("r");
  req.set_state(v1::RuleStatus::ISSUES_FOUND);
  req.set_action(std::string(100 << 10, 'k'));
  Reply r = Call<v1::RuleStatus, v1::RuleStatus>(&v1::TensorKeep::Stub::ReportRuleStatus, req);
  ExpectShortBadRequest(r, "unknown rule action 'kkkk");
  EXPECT_THAT(r.status.error_message(), HasSubstr("(102400 bytes)"));
  req.set_action("");
  req.set_message(std::string(v1::MAX_RULE_MESSAGE_BYTES + 1, 'm'));
  r = Call<v1::RuleStatus, v1::RuleStatus>(&v1::TensorKeep::Stub::ReportRuleStatus, req);
  ExpectShortBadRequest(r, absl::StrCat("the limit is ", v1::MAX_RULE_MESSAGE_BYTES));
}

TEST_F(HostileRequestTest, AnyHugeEchoIsCutToTheStatusMessageLimit) {
  // Messages that quote a name without QuoteInput are cut by ToGrpcStatus,
  // and keep their reason.
  v1::ListStepsRequest req;
  req.set_trial("t");
  req.set_tensor(std::string(1 << 20, 'z'));
  Reply r = Call<v1::ListStepsRequest, v1::StepList>(&v1::TensorKeep::Stub::ListSteps, req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(r.reason, "TENSOR_UNAVAILABLE");
  EXPECT_LE(r.status.error_message().size(), kMaxStatusMessageBytes);
  EXPECT_THAT(r.status.error_message(), HasSubstr("... (message cut from "));
}

TEST_F(HostileRequestTest, BadRegexIsABadRequestOnTheWire) {
  v1::ListTensorNamesRequest req;
  req.set_trial("t");
  req.add_regex("(a)\\1");
  Reply r =
      Call<v1::ListTensorNamesRequest, v1::NameList>(&v1::TensorKeep::Stub::ListTensorNames, req);
  ExpectShortBadRequest(r, "backreferences are not supported");
  req.set_regex(0, std::string(40000, '('));
  r = Call<v1::ListTensorNamesRequest, v1::NameList>(&v1::TensorKeep::Stub::ListTensorNames, req);
  ExpectShortBadRequest(r, "too long");
}

TEST_F(HostileRequestTest, InfiniteAndHugeTimeoutsWaitInsteadOfTimingOutAtOnce) {
  for (double timeout : {std::numeric_limits<double>::infinity(), 1e300, 1e10}) {
    // Step 5 never comes: the call's own deadline ends the wait, not a TIMEOUT.
    Reply r = Wait(5, timeout, std::chrono::milliseconds(400));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << timeout;
    EXPECT_EQ(r.reason, "") << timeout << ": " << r.status.error_message();
    EXPECT_GE(r.seconds, 0.35) << timeout;
  }
  // And such a wait ends when the step arrives.
  std::thread writer([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto w = OpenWriter("t");
    ASSERT_TRUE(w->Write(Float32Record("x", 1, 16, 2)).ok());
    ASSERT_TRUE(w->EndStep(1).ok());
    ASSERT_TRUE(w->Close(false).ok());
  });
  Reply r = Wait(1, std::numeric_limits<double>::infinity(), std::chrono::milliseconds(30000));
  writer.join();
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  // A finite timeout still times out with its reason.
  r = Wait(5, 0.1, std::chrono::milliseconds(30000));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(r.reason, "TIMEOUT");
}

TEST_F(HostileRequestTest, NegativeOrNanTimeoutIsABadRequest) {
  for (double timeout :
       {-1.0, -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    Reply r = Wait(5, timeout, std::chrono::milliseconds(30000));
    ExpectShortBadRequest(r, "timeout_seconds must be >= 0");
  }
}

}  // namespace
}  // namespace tensorkeep
