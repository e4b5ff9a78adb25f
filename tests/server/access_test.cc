// TLS, mutual TLS, tokens with roles and trial prefixes, the secure-by-default
// rule and the health and reflection services, against real tensorkeep-server
// processes with certificates made by openssl for the test.
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/tokens.h"
#include "client/connection.h"
#include "client/credentials.h"
#include "client/writer.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tensorkeep.grpc.pb.h"
#include "server/access/method_roles.h"
#include "tests/server/server_process.h"
#include "tests/server/test_certs.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::MethodDescriptor;
using testing::ServerProcess;

constexpr char kReadToken[] = "tk_test_read_token_0123456789";
constexpr char kWriteToken[] = "tk_test_write_token_0123456789";
constexpr char kAdminToken[] = "tk_test_admin_token_0123456789";
constexpr char kTeamToken[] = "tk_test_team_a_write_token_0123";  // write, team-a- only

std::string TokenLine(const std::string& token, const std::string& rest) {
  return TokenHashText(Sha256(token)) + " " + rest + "\n";
}

std::string RunCommand(const std::string& command, int* exit_code) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string BinDir() {
  const char* dir = std::getenv("TK_BIN_DIR");
  return dir != nullptr ? dir : "build/bin";
}

// The role the issue gives each RPC: the test's own table, not the server's.
Role ExpectedRole(const std::string& method) {
  static const std::set<std::string> write = {"Push", "EndTrial", "ReportRuleStatus",
                                              "MarkWorkerLost", "DeclareWorkerLost",
                                              "PutCollections"};
  static const std::set<std::string> admin = {"DeleteTrial", "PublishTrial"};
  if (admin.count(method)) return Role::kAdmin;
  if (write.count(method)) return Role::kWrite;
  return Role::kRead;
}

// Sets every string field named "trial" in `m` and its message fields (one
// level down) to `trial`; true if one was found.
bool SetTrial(Message* m, const std::string& trial, int depth = 0) {
  bool found = false;
  const Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) continue;
    if (f->name() == "trial" && f->type() == FieldDescriptor::TYPE_STRING) {
      m->GetReflection()->SetString(m, f, trial);
      found = true;
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE && depth < 1 &&
               f->message_type()->full_name().rfind("tensorkeep.", 0) == 0) {
      Message* sub = m->GetReflection()->MutableMessage(m, f);
      if (SetTrial(sub, trial, depth + 1)) {
        found = true;
      } else {
        m->GetReflection()->ClearField(m, f);
      }
    }
  }
  return found;
}

struct CallResult {
  grpc::Status status;
  std::string first_response;  // serialized, if one came
};

// Calls `method` (a full path) with one serialized request, as a generic
// stream (which serves unary and streaming methods alike), reading at most
// one response, with `token` as a bearer token (none if empty). A
// `server_streaming` call is cancelled after its first response (a watch
// would go on).
CallResult CallGeneric(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                       const std::string& request, const std::string& token,
                       bool server_streaming = false) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) context.AddMetadata("authorization", std::string("Bearer ") + token);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&context, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  grpc::Slice slice(request);
  grpc::ByteBuffer buffer(&slice, 1);
  call->Write(buffer, reinterpret_cast<void*>(2));
  step(2);
  call->WritesDone(reinterpret_cast<void*>(3));
  step(3);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  CallResult result;
  if (step(4)) {
    std::vector<grpc::Slice> slices;
    (void)response.Dump(&slices);
    for (const auto& s : slices) {
      result.first_response.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    if (server_streaming) context.TryCancel();
  }
  call->Finish(&result.status, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return result;
}

std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address, const std::string& ca) {
  std::ifstream in(ca);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return grpc::CreateChannel(address, grpc::SslCredentials(ssl));
}

class AccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("access");
    std::string why;
    if (!testing::MakeTestCerts(dir_, &certs_, &why)) GTEST_SKIP() << why;
    tokens_ = dir_ + "/tokens";
    WriteTokens(TokenLine(kReadToken, "read reader") + TokenLine(kWriteToken, "write writer") +
                "# a comment, and a blank line\n\n" + TokenLine(kAdminToken, "admin boss") +
                TokenLine(kTeamToken, "write team-a team-a- shared-"));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteTokens(const std::string& text) {
    std::ofstream out(tokens_ + ".new");
    out << text;
    out.close();
    std::filesystem::rename(tokens_ + ".new", tokens_);
  }

  std::vector<std::string> DataDir(const std::string& name) {
    return {"--listen", "127.0.0.1:0", "--data-dir", dir_ + "/" + name};
  }
  std::vector<std::string> Tls(std::vector<std::string> args) {
    for (const std::string& a : {std::string("--tls-cert"), certs_.server_cert,
                                 std::string("--tls-key"), certs_.server_key}) {
      args.push_back(a);
    }
    return args;
  }
  std::vector<std::string> WithTokens(std::vector<std::string> args) {
    args.push_back("--auth-tokens");
    args.push_back(tokens_);
    return args;
  }

  std::string dir_;
  std::string tokens_;
  testing::TestCerts certs_;
};

// Every RPC of the service, with no token and each role: the server's table
// must give each the role the issue gives it, and deny what it does not know.
TEST_F(AccessTest, EveryRpcWithNoTokenAndEachRole) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(WithTokens(Tls(DataDir("db"))))) << server.stderr_text;
  auto channel = TlsChannel(server.address, certs_.ca);
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      v1::TensorKeep::service_full_name());
  ASSERT_NE(service, nullptr);
  google::protobuf::DynamicMessageFactory factory;
  const std::map<std::string, Role> tokens = {{"", Role::kNone},
                                              {kReadToken, Role::kRead},
                                              {kWriteToken, Role::kWrite},
                                              {kAdminToken, Role::kAdmin}};
  for (int i = 0; i < service->method_count(); ++i) {
    const MethodDescriptor* m = service->method(i);
    const std::string path = "/" + service->full_name() + "/" + m->name();
    SCOPED_TRACE(path);
    // The server's table has the method, with the issue's role.
    const auto table_role = RoleForMethod(path);
    ASSERT_TRUE(table_role.has_value())
        << m->name() << " has no role in server/access/method_roles.cc";
    EXPECT_EQ(*table_role, ExpectedRole(m->name()));

    // A request naming a trial that never exists (a Push Open with
    // num_workers 0 is refused after the checks, creating nothing).
    std::unique_ptr<Message> request(factory.GetPrototype(m->input_type())->New());
    SetTrial(request.get(), "team-b-never");
    if (m->name() == "Push") {
      v1::PushRequest p;
      p.set_seq(1);
      p.mutable_open()->set_trial("team-b-never");
      p.mutable_open()->set_worker("w0");
      p.mutable_open()->set_num_workers(0);
      request->ParseFromString(p.SerializeAsString());
    }
    const std::string bytes = request->SerializeAsString();
    for (const auto& [token, role] : tokens) {
      SCOPED_TRACE(std::string("role ") + RoleName(role));
      const CallResult r = CallGeneric(channel, path, bytes, token, m->server_streaming());
      if (role == Role::kNone) {
        EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << r.status.error_message();
        EXPECT_NE(r.status.error_message().find("TENSORKEEP_TOKEN"), std::string::npos)
            << r.status.error_message();
      } else if (role < ExpectedRole(m->name())) {
        EXPECT_EQ(r.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << r.status.error_message();
        EXPECT_NE(r.status.error_message().find(RoleName(ExpectedRole(m->name()))),
                  std::string::npos)
            << r.status.error_message();
      } else {
        EXPECT_NE(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << r.status.error_message();
        EXPECT_NE(r.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << r.status.error_message();
      }
    }
  }
  // A method the table does not know is refused, even to admin.
  const CallResult unknown =
      CallGeneric(channel, "/tensorkeep.v1.TensorKeep/NoSuchMethod", "", kAdminToken);
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << unknown.status.error_message();
  // Nothing was stored by the refused calls.
  const CallResult list =
      CallGeneric(channel, "/tensorkeep.v1.TensorKeep/ListTrials", "", kAdminToken);
  ASSERT_TRUE(list.status.ok()) << list.status.error_message();
  v1::ListTrialsResponse trials;
  ASSERT_TRUE(trials.ParseFromString(list.first_response));
  EXPECT_EQ(trials.trials_size(), 0);
}

// A token with trial prefixes may act on no other trial, through any RPC that
// names one; listings show only its trials.
TEST_F(AccessTest, TrialPrefixesScopeEveryRpcThatNamesATrial) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(WithTokens(Tls(DataDir("db"))))) << server.stderr_text;
  // Two trials, one of each team, written with the admin token.
  for (const std::string trial : {"team-a-run", "team-b-run"}) {
    client::WriterOptions o;
    o.server = server.address;
    o.security = {certs_.ca, "", "", kAdminToken};
    o.trial = trial;
    auto w = client::Writer::Open(o);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Write(testing::Float32Record("loss", 0, 1, 1)).ok());
    ASSERT_TRUE((*w)->EndStep(0).ok());
    ASSERT_TRUE((*w)->Close(true).ok());
  }
  auto channel = TlsChannel(server.address, certs_.ca);
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      v1::TensorKeep::service_full_name());
  google::protobuf::DynamicMessageFactory factory;
  int scoped = 0;
  for (int i = 0; i < service->method_count(); ++i) {
    const MethodDescriptor* m = service->method(i);
    const std::string path = "/" + service->full_name() + "/" + m->name();
    SCOPED_TRACE(path);
    std::unique_ptr<Message> request(factory.GetPrototype(m->input_type())->New());
    if (!SetTrial(request.get(), "team-b-run")) continue;  // names no trial (ListTrials)
    ++scoped;
    if (m->name() == "Push") {
      v1::PushRequest p;
      p.set_seq(1);
      p.mutable_open()->set_trial("team-b-run");
      p.mutable_open()->set_worker("intruder");
      p.mutable_open()->set_num_workers(1);
      request->ParseFromString(p.SerializeAsString());
    }
    if (m->name() == "ReportRuleStatus") {
      v1::RuleStatus s;
      s.set_trial("team-b-run");
      s.set_rule("forged");
      s.set_state(v1::RuleStatus::ISSUES_FOUND);
      s.set_action("stop");
      request->ParseFromString(s.SerializeAsString());
    }
    const CallResult r =
        CallGeneric(channel, path, request->SerializeAsString(), kTeamToken, m->server_streaming());
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << r.status.error_message();
    // Refused for its role (DeleteTrial and PublishTrial need admin) or for its prefixes.
    const std::string says = ExpectedRole(m->name()) > Role::kWrite ? "needs admin" : "team-a-";
    EXPECT_NE(r.status.error_message().find(says), std::string::npos)
        << r.status.error_message();
  }
  EXPECT_GE(scoped, 20);
  // Its own trial works; the listing shows only it.
  v1::TrialRef own;
  own.set_trial("team-a-run");
  EXPECT_TRUE(CallGeneric(channel, "/tensorkeep.v1.TensorKeep/GetTrial", own.SerializeAsString(),
                          kTeamToken)
                  .status.ok());
  const CallResult list =
      CallGeneric(channel, "/tensorkeep.v1.TensorKeep/ListTrials", "", kTeamToken);
  v1::ListTrialsResponse trials;
  ASSERT_TRUE(trials.ParseFromString(list.first_response));
  ASSERT_EQ(trials.trials_size(), 1);
  EXPECT_EQ(trials.trials(0).name(), "team-a-run");
  // The other team's trial is untouched: running, no rule status, one worker.
  v1::TrialRef other;
  other.set_trial("team-b-run");
  const CallResult rules = CallGeneric(channel, "/tensorkeep.v1.TensorKeep/ListRuleStatuses",
                                       other.SerializeAsString(), kReadToken);
  v1::RuleStatusList statuses;
  ASSERT_TRUE(statuses.ParseFromString(rules.first_response));
  EXPECT_EQ(statuses.statuses_size(), 0);
  const CallResult workers = CallGeneric(channel, "/tensorkeep.v1.TensorKeep/ListWorkers",
                                         other.SerializeAsString(), kReadToken);
  v1::WorkerList wl;
  ASSERT_TRUE(wl.ParseFromString(workers.first_response));
  EXPECT_EQ(wl.workers_size(), 1);
  // Who ended a trial is logged by the token's name.
  EXPECT_TRUE(CallGeneric(channel, "/tensorkeep.v1.TensorKeep/EndTrial", own.SerializeAsString(),
                          kTeamToken)
                  .status.ok());
  // So is who deleted one; the other team's trial stays.
  v1::DeleteTrialRequest del;
  del.set_trial("team-a-run");
  const CallResult deleted = CallGeneric(channel, "/tensorkeep.v1.TensorKeep/DeleteTrial",
                                         del.SerializeAsString(), kAdminToken);
  ASSERT_TRUE(deleted.status.ok()) << deleted.status.error_message();
  v1::DeleteTrialResponse what;
  ASSERT_TRUE(what.ParseFromString(deleted.first_response));
  EXPECT_EQ(what.deleted_by(), "boss");
  EXPECT_EQ(CallGeneric(channel, "/tensorkeep.v1.TensorKeep/GetTrial", own.SerializeAsString(),
                        kTeamToken)
                .status.error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(CallGeneric(channel, "/tensorkeep.v1.TensorKeep/GetTrial", other.SerializeAsString(),
                          kReadToken)
                  .status.ok());
  server.Signal(SIGTERM);
  server.Wait();
  EXPECT_NE(server.stderr_text.find("team-a ("), std::string::npos) << server.stderr_text;
  EXPECT_NE(server.stderr_text.find("ends trial 'team-a-run'"), std::string::npos);
  EXPECT_NE(server.stderr_text.find("boss deleted trial 'team-a-run'"), std::string::npos);
}

// A token removed from the file stops working once SIGHUP is handled; a new
// one starts working; a broken file keeps the tokens in force. Without TLS
// on loopback (gRPC's local credentials carry the token).
TEST_F(AccessTest, SighupReloadsTokens) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(WithTokens(DataDir("db")))) << server.stderr_text;
  auto list = [&](const std::string& token) {
    auto c = Connection::Open(server.address, {"", "", "", token});
    EXPECT_TRUE(c.ok()) << c.status();
    grpc::ClientContext context;
    v1::ListTrialsResponse r;
    return (*c)->stub()->ListTrials(&context, {}, &r).error_code();
  };
  ASSERT_EQ(list(kReadToken), grpc::StatusCode::OK);
  const std::string fresh = "tk_test_fresh_token_9876543210";
  ASSERT_EQ(list(fresh), grpc::StatusCode::UNAUTHENTICATED);
  WriteTokens(TokenLine(kWriteToken, "write writer") + TokenLine(fresh, "read fresh"));
  server.Signal(SIGHUP);
  // The reload is asynchronous: wait (bounded) for the first refused call.
  grpc::StatusCode code = grpc::StatusCode::OK;
  for (int i = 0; i < 250 && code == grpc::StatusCode::OK; ++i) {
    code = list(kReadToken);
    if (code == grpc::StatusCode::OK) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(code, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list(fresh), grpc::StatusCode::OK);
  EXPECT_EQ(list(kWriteToken), grpc::StatusCode::OK);
  // A broken file: refused, the tokens in force stay.
  WriteTokens("sha256:nothex read broken\n");
  server.Signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(list(fresh), grpc::StatusCode::OK);
  server.Signal(SIGTERM);
  server.Wait();
  EXPECT_NE(server.stderr_text.find("tokens not reloaded"), std::string::npos)
      << server.stderr_text;
}

absl::Status ListWith(const std::string& address, const ClientSecurity& security) {
  auto c = Connection::Open(address, security);
  if (!c.ok()) return c.status();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ListTrialsResponse r;
  return FromGrpc((*c)->stub()->ListTrials(&context, {}, &r), &context, **c);
}

// "localhost" resolves, and only to loopback addresses (a minimal container
// may have no /etc/hosts, and then asks DNS for it).
bool LocalhostIsLoopback() {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo("localhost", nullptr, &hints, &found) != 0) return false;
  bool loopback = found != nullptr;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      loopback = loopback && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      loopback = loopback && IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
  }
  freeaddrinfo(found);
  return loopback;
}

TEST_F(AccessTest, TlsThroughTheNameLocalhost) {
  if (!LocalhostIsLoopback()) {
    GTEST_SKIP() << "'localhost' does not resolve to a loopback address on this machine "
                    "(no /etc/hosts?): the certificate's DNS name cannot be tried";
  }
  ServerProcess tls;
  ASSERT_TRUE(tls.Start(Tls(DataDir("tls-localhost")))) << tls.stderr_text;
  // localhost is in the certificate too.
  const std::string port = tls.address.substr(tls.address.rfind(':') + 1);
  EXPECT_TRUE(ListWith("localhost:" + port, {certs_.ca, "", "", ""}).ok());
}

TEST_F(AccessTest, TlsClientLibraryAcceptedAndRefused) {
  ServerProcess tls;
  ASSERT_TRUE(tls.Start(Tls(DataDir("tls")))) << tls.stderr_text;
  EXPECT_TRUE(ListWith(tls.address, {certs_.ca, "", "", ""}).ok());
  // Plaintext against TLS: says so.
  absl::Status plain = ListWith(tls.address, {});
  EXPECT_EQ(plain.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plain.message().find("uses TLS but this client connects in plaintext"),
            std::string::npos)
      << plain;
  // A CA that did not sign the server's certificate.
  absl::Status wrong = ListWith(tls.address, {certs_.other_ca, "", "", ""});
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(wrong.message().find("TLS handshake"), std::string::npos) << wrong;
  // TLS against plaintext: says so.
  ServerProcess plaintext;
  ASSERT_TRUE(plaintext.Start(DataDir("plain"))) << plaintext.stderr_text;
  absl::Status reverse = ListWith(plaintext.address, {certs_.ca, "", "", ""});
  EXPECT_EQ(reverse.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(reverse.message().find("does not use TLS but this client does"), std::string::npos)
      << reverse;
  EXPECT_TRUE(ListWith(plaintext.address, {}).ok());
  // Files that cannot be used are named.
  absl::Status missing = ListWith(tls.address, {dir_ + "/nope.pem", "", "", ""});
  EXPECT_NE(missing.message().find("nope.pem"), std::string::npos) << missing;
  // A token is not sent in clear text beyond loopback.
  absl::Status clear = ListWith("192.0.2.1:7077", {"", "", "", kReadToken});
  EXPECT_EQ(clear.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(clear.message().find("clear text"), std::string::npos) << clear;
}

TEST_F(AccessTest, MutualTlsRefusesClientsWithoutACertificateOfItsCa) {
  ServerProcess server;
  auto args = Tls(DataDir("db"));
  args.push_back("--tls-client-ca");
  args.push_back(certs_.ca);
  ASSERT_TRUE(server.Start(args)) << server.stderr_text;
  EXPECT_TRUE(
      ListWith(server.address, {certs_.ca, certs_.client_cert, certs_.client_key, ""}).ok());
  absl::Status none = ListWith(server.address, {certs_.ca, "", "", ""});
  EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable) << none;
  EXPECT_NE(none.message().find("client certificates"), std::string::npos) << none;
  absl::Status other =
      ListWith(server.address, {certs_.ca, certs_.other_cert, certs_.other_key, ""});
  EXPECT_EQ(other.code(), absl::StatusCode::kUnavailable) << other;
  absl::Status half = ListWith(server.address, {certs_.ca, certs_.client_cert, "", ""});
  EXPECT_EQ(half.code(), absl::StatusCode::kInvalidArgument) << half;
}

// The CLI and tensorkeep-rules take the flags and the environment variables.
TEST_F(AccessTest, CliAndRuleWorkerWithTlsAndTokens) {
  ServerProcess server;
  auto args = WithTokens(Tls(DataDir("db")));
  args.push_back("--tls-client-ca");
  args.push_back(certs_.ca);
  ASSERT_TRUE(server.Start(args)) << server.stderr_text;
  const std::string cli = BinDir() + "/tensorkeep --server " + server.address;
  const std::string mtls = " --tls-ca " + certs_.ca + " --tls-cert " + certs_.client_cert +
                           " --tls-key " + certs_.client_key;
  int rc = 0;
  std::string out = RunCommand(cli + mtls + " --token " + kAdminToken + " trials", &rc);
  EXPECT_EQ(rc, 0) << out;
  out = RunCommand("TENSORKEEP_TLS_CA=" + certs_.ca + " TENSORKEEP_TLS_CERT=" + certs_.client_cert +
                       " TENSORKEEP_TLS_KEY=" + certs_.client_key +
                       " TENSORKEEP_TOKEN=" + kReadToken + " " + cli + " trials",
                   &rc);
  EXPECT_EQ(rc, 0) << out;
  out = RunCommand(cli + " --token " + kReadToken + " trials", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("uses TLS"), std::string::npos) << out;
  out = RunCommand(cli + mtls + " trials", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("needs a token"), std::string::npos) << out;
  out = RunCommand(cli + " --tls-ca " + certs_.ca + " --token " + kReadToken + " trials", &rc);
  EXPECT_EQ(rc, 1) << out;
  // A read token cannot end a trial.
  out = RunCommand(cli + mtls + " --token " + kReadToken + " end team-a-cli", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("has role read"), std::string::npos) << out;

  // tensorkeep-rules: refused without TLS, runs with it (on an ended trial
  // with one step; the rule finds nothing and the worker exits 0).
  {
    client::WriterOptions o;
    o.server = server.address;
    o.security = {certs_.ca, certs_.client_cert, certs_.client_key, kWriteToken};
    o.trial = "rules-trial";
    auto w = client::Writer::Open(o);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Write(testing::Float32Record("loss", 0, 1, 1)).ok());
    ASSERT_TRUE((*w)->EndStep(0).ok());
    ASSERT_TRUE((*w)->Close(true).ok());
    auto c = Connection::Open(server.address, o.security);
    grpc::ClientContext context;
    v1::TrialRef ref;
    ref.set_trial("rules-trial");
    v1::EndTrialResponse ended;
    ASSERT_TRUE((*c)->stub()->EndTrial(&context, ref, &ended).ok());
  }
  const std::string rules =
      BinDir() + "/tensorkeep-rules --server " + server.address +
      " --trial rules-trial --rule AllZero --param tensor_regex=loss --log-level warn";
  out = RunCommand("timeout 30 " + rules + " --token " + kWriteToken, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("uses TLS"), std::string::npos) << out;
  out = RunCommand("timeout 30 " + rules + mtls + " --token " + kReadToken, &rc);
  EXPECT_EQ(rc, 1) << out;  // read cannot report a status
  out = RunCommand("timeout 30 " + rules + mtls + " --token " + kWriteToken, &rc);
  EXPECT_EQ(rc, 0) << out;
  out = RunCommand("TENSORKEEP_TLS_CA=" + certs_.ca + " TENSORKEEP_TLS_CERT=" + certs_.client_cert +
                       " TENSORKEEP_TLS_KEY=" + certs_.client_key + " TENSORKEEP_TOKEN=" +
                       kWriteToken + " timeout 30 " + rules + " --name again",
                   &rc);
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(AccessTest, TokenNewPrintsATokenAndItsLine) {
  int rc = 0;
  const std::string out =
      RunCommand(BinDir() + "/tensorkeep token-new alice write team-a- team-c-", &rc);
  ASSERT_EQ(rc, 0) << out;
  std::vector<std::string> lines;
  std::string line;
  for (char ch : out) {
    if (ch == '\n') {
      lines.push_back(line);
      line.clear();
    } else {
      line += ch;
    }
  }
  ASSERT_EQ(lines.size(), 4u) << out;
  std::string token = lines[1].substr(lines[1].find_first_not_of(' '));
  EXPECT_EQ(token.rfind("tk_", 0), 0u);
  EXPECT_EQ(lines[3], TokenHashText(Sha256(token)) + " write alice team-a- team-c-");
  // The line works as a token file.
  WriteTokens(lines[3] + "\n");
  ServerProcess server;
  ASSERT_TRUE(server.Start(WithTokens(DataDir("db")))) << server.stderr_text;
  EXPECT_TRUE(ListWith(server.address, {"", "", "", token}).ok());
  const std::string bad = RunCommand(BinDir() + "/tensorkeep token-new bob superuser", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(bad.find("unknown role 'superuser'"), std::string::npos) << bad;
}

TEST_F(AccessTest, NonLoopbackNeedsTlsAndTokensOrInsecure) {
  // None of these binds: the checks come before the port.
  struct Case {
    std::vector<std::string> extra;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {{}, {"--tls-cert FILE --tls-key FILE and --auth-tokens FILE", "--insecure"}},
      {Tls({}), {"Add --auth-tokens FILE"}},
      {WithTokens({}), {"Add --tls-cert FILE --tls-key FILE ("}},
      {WithTokens({"--insecure"}), {"loopback only"}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"--listen", "192.0.2.1:7077", "--data-dir", dir_ + "/db"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    ServerProcess server;
    EXPECT_FALSE(server.Start(args));
    const int status = server.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
    for (const auto& s : c.says) {
      EXPECT_NE(server.stderr_text.find(s), std::string::npos) << server.stderr_text;
    }
    // Refused before touching the data directory.
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/db"));
  }
  // Loopback needs neither.
  ServerProcess local;
  EXPECT_TRUE(local.Start(DataDir("local"))) << local.stderr_text;
}

// grpc.health.v1.Health answers without a token: SERVING, then NOT_SERVING
// while the collector drains its writers at shutdown. Reflection needs read.
TEST_F(AccessTest, HealthWithoutTokenAndReflectionWithRead) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(WithTokens(Tls(DataDir("db"))))) << server.stderr_text;
  auto channel = TlsChannel(server.address, certs_.ca);
  const std::string check = "/grpc.health.v1.Health/Check";
  // HealthCheckRequest{service: ""} is empty; the response's field 1 is the
  // status: 1 SERVING, 2 NOT_SERVING.
  CallResult health = CallGeneric(channel, check, "", "");
  ASSERT_TRUE(health.status.ok()) << health.status.error_message();
  EXPECT_EQ(health.first_response, std::string("\x08\x01", 2));
  // Reflection: list_services (field 7) "*".
  const std::string list_services("\x3a\x01*", 3);
  const std::string reflection = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
  EXPECT_EQ(CallGeneric(channel, reflection, list_services, "").status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  CallResult listed = CallGeneric(channel, reflection, list_services, kReadToken);
  EXPECT_NE(listed.first_response.find("tensorkeep.v1.TensorKeep"), std::string::npos);
  EXPECT_NE(listed.first_response.find("grpc.health.v1.Health"), std::string::npos);

  // The CLI's probe command, with TLS and no token.
  int rc = 0;
  const std::string out = RunCommand(
      BinDir() + "/tensorkeep --server " + server.address + " --tls-ca " + certs_.ca + " health",
      &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "SERVING\n");

  // Health.Watch sees SERVING, then NOT_SERVING once SIGTERM starts the
  // shutdown (before the port closes).
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::CompletionQueue cq;
  auto watch = stub.PrepareCall(&context, "/grpc.health.v1.Health/Watch", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto next = [&] { return cq.Next(&tag, &ok) && ok; };
  watch->StartCall(nullptr);
  ASSERT_TRUE(next());
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  watch->Write(request, nullptr);
  ASSERT_TRUE(next());
  auto read_status = [&]() -> std::string {
    grpc::ByteBuffer response;
    watch->Read(&response, nullptr);
    if (!next()) return "(stream ended)";
    std::vector<grpc::Slice> slices;
    std::string bytes;
    (void)response.Dump(&slices);
    for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    return bytes;
  };
  EXPECT_EQ(read_status(), std::string("\x08\x01", 2));
  server.Signal(SIGTERM);
  EXPECT_EQ(read_status(), std::string("\x08\x02", 2));
  context.TryCancel();
  grpc::Status finished;
  watch->Finish(&finished, nullptr);
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  server.Wait();
}

}  // namespace
}  // namespace tensorkeep
