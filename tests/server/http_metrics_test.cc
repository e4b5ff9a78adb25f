// --http-listen against real tensorkeep-server processes: the second stdout
// line, /metrics parsed and checked against what the test pushed with the C++
// client, /healthz, tokens (401 without, 403 never for read: /metrics needs
// read), TLS, and the secure-by-default refusal of the HTTP address.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/tokens.h"
#include "client/connection.h"
#include "client/trial.h"
#include "client/writer.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/server/prometheus_parse.h"
#include "tests/server/server_process.h"
#include "tests/server/test_certs.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::ParsedMetrics;
using testing::ParsePrometheusText;
using testing::ServerProcess;

constexpr char kReadToken[] = "tk_http_test_read_token_012345";
constexpr char kWriteToken[] = "tk_http_test_write_token_01234";

std::pair<std::string, int> HostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  return {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
}

class HttpMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The TLS clients write to connections the server refused.
    signal(SIGPIPE, SIG_IGN);
    dir_ = testing::MakeTempDir("http");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Starts a server with --http-listen on loopback port 0 and `extra` flags.
  bool StartServer(ServerProcess* p, const std::vector<std::string>& extra,
                   const std::string& data = "data") {
    std::vector<std::string> args = {"--listen",    "127.0.0.1:0", "--http-listen",
                                     "127.0.0.1:0", "--data-dir",  dir_ + "/" + data,
                                     "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    return p->Start(args);
  }

  std::string dir_;
};

TEST_F(HttpMetricsTest, SecondLineAndMetricsMatchWhatWasPushed) {
  ServerProcess server;
  ASSERT_TRUE(StartServer(&server, {})) << server.first_line << server.stderr_text;
  ASSERT_FALSE(server.http_address.empty());
  const auto [host, port] = HostPort(server.http_address);
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_GT(port, 0);

  // Known data: 5 steps x 3 tensors of 1000 float32 from one worker.
  constexpr int kSteps = 5, kTensors = 3, kElements = 1000;
  {
    auto writer = testing::OpenWriter(server.address, "metrics-trial");
    ASSERT_NE(writer, nullptr);
    for (int step = 0; step < kSteps; ++step) {
      for (int t = 0; t < kTensors; ++t) {
        ASSERT_TRUE(writer
                        ->Write(testing::Float32Record("t" + std::to_string(t), step, kElements,
                                                       step * 10 + t))
                        .ok());
      }
      ASSERT_TRUE(writer->EndStep(step).ok());
    }
    ASSERT_TRUE(writer->Close(/*end_of_training=*/true).ok());
  }
  auto connection = Connection::Open(server.address);
  ASSERT_TRUE(connection.ok());
  // One query that succeeds and one that fails with NOT_FOUND.
  ASSERT_TRUE(client::Trial(*connection, "metrics-trial").Summary().ok());
  EXPECT_FALSE(client::Trial(*connection, "no-such-trial").Summary().ok());

  httplib::Client http(host, port);
  http.set_read_timeout(10, 0);
  // The writer's Close returns at the close's ack; the collector counts the
  // stream until the call is done, a moment later: read again, bounded.
  ParsedMetrics m;
  std::string body;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto res = http.Get("/metrics");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    body = res->body;
    m = ParsePrometheusText(body);
    ASSERT_EQ(m.error, "") << res->body;
    if (m.at("tensorkeep_open_push_streams") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  EXPECT_EQ(m.type.at("tensorkeep_ingested_records_total"), "counter");
  EXPECT_EQ(m.at("tensorkeep_ingested_records_total"), kSteps * kTensors);
  EXPECT_GE(m.at("tensorkeep_ingested_bytes_total"), kSteps * kTensors * kElements * 4.0);
  EXPECT_LT(m.at("tensorkeep_ingested_bytes_total"), 2 * kSteps * kTensors * kElements * 4.0);
  EXPECT_EQ(m.at("tensorkeep_trials"), 1);
  EXPECT_EQ(m.at("tensorkeep_trials_running"), 0);  // closed with end-of-training
  EXPECT_EQ(m.at("tensorkeep_open_push_streams"), 0);
  EXPECT_EQ(m.at("tensorkeep_queued_bytes"), 0);
  EXPECT_GT(m.at("tensorkeep_disk_free_bytes"), 0);
  EXPECT_GE(m.at("tensorkeep_value_log_bytes"), 0);
  EXPECT_EQ(m.at("tensorkeep_value_log_garbage_bytes"), 0);
  EXPECT_EQ(m.at("tensorkeep_serving"), 1);
  EXPECT_EQ(m.at("tensorkeep_memory_budget_limit_bytes"), 1024.0 * 1024 * 1024);
  EXPECT_GE(m.at("tensorkeep_memory_budget_used_bytes"), 0);
  EXPECT_LE(m.at("tensorkeep_memory_budget_used_bytes"),
            m.at("tensorkeep_memory_budget_limit_bytes"));

  // The commit latency histogram: cumulative buckets, +Inf = count = writes.
  EXPECT_EQ(m.type.at("tensorkeep_commit_latency_seconds"), "histogram");
  const double count = m.at("tensorkeep_commit_latency_seconds_count");
  EXPECT_EQ(count, m.at("tensorkeep_commit_writes_total"));
  EXPECT_GE(count, 1);
  EXPECT_EQ(m.at("tensorkeep_commit_latency_seconds_bucket{le=\"+Inf\"}"), count);
  double previous = 0;
  int buckets = 0;
  for (const auto& [key, value] : m.samples) {
    if (key.rfind("tensorkeep_commit_latency_seconds_bucket{", 0) != 0) continue;
    ++buckets;
    EXPECT_LE(value, count) << key;
    (void)previous;
  }
  EXPECT_GE(buckets, 10);
  EXPECT_GT(m.at("tensorkeep_commit_latency_seconds_sum"), 0);
  EXPECT_LT(m.at("tensorkeep_commit_latency_seconds_sum"), count * 10);
  // Bucket order as written: each le's count is at least the previous one's.
  {
    std::istringstream lines(body);
    std::string line;
    double last = -1;
    while (std::getline(lines, line)) {
      if (line.rfind("tensorkeep_commit_latency_seconds_bucket{", 0) != 0) continue;
      const double v = std::stod(line.substr(line.rfind(' ') + 1));
      EXPECT_GE(v, last) << line;
      last = v;
    }
  }

  // gRPC calls by method and code.
  const std::string service = "grpc_service=\"tensorkeep.v1.TensorKeep\"";
  EXPECT_EQ(
      m.at("grpc_server_handled_total{" + service + ",grpc_method=\"Push\",grpc_code=\"OK\"}"), 1);
  EXPECT_EQ(
      m.at("grpc_server_handled_total{" + service + ",grpc_method=\"GetTrial\",grpc_code=\"OK\"}"),
      1);
  EXPECT_EQ(m.at("grpc_server_handled_total{" + service +
                 ",grpc_method=\"GetTrial\",grpc_code=\"NotFound\"}"),
            1);

  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");

  auto missing = http.Get("/no-such-page");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto post = http.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_NE(post->status, 200);
}

TEST_F(HttpMetricsTest, TokensGuardMetricsNotHealth) {
  const std::string tokens = dir_ + "/tokens";
  {
    std::ofstream f(tokens);
    f << TokenHashText(Sha256(kReadToken)) << " read reader\n";
    f << TokenHashText(Sha256(kWriteToken)) << " write team-a team-a-\n";
  }
  ServerProcess server;
  ASSERT_TRUE(StartServer(&server, {"--auth-tokens", tokens})) << server.stderr_text;
  const auto [host, port] = HostPort(server.http_address);
  httplib::Client http(host, port);
  http.set_read_timeout(10, 0);

  auto none = http.Get("/metrics");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer realm=\"tensorkeep\"");
  EXPECT_NE(none->body.find("Authorization: Bearer TOKEN"), std::string::npos) << none->body;
  EXPECT_EQ(none->body.find("tensorkeep_"), std::string::npos);

  auto wrong = http.Get("/metrics", {{"Authorization", "Bearer not-a-token"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto basic = http.Get("/metrics", {{"Authorization", "Basic dXNlcjpwYXNz"}});
  ASSERT_TRUE(basic);
  EXPECT_EQ(basic->status, 401);

  for (const char* token : {kReadToken, kWriteToken}) {
    auto ok = http.Get("/metrics", {{"Authorization", std::string("Bearer ") + token}});
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << token;
    EXPECT_EQ(ParsePrometheusText(ok->body).error, "");
  }
  // Probes carry no token.
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(HttpMetricsTest, TlsWithTheGrpcCertificate) {
  testing::TestCerts certs;
  std::string why;
  if (!testing::MakeTestCerts(dir_, &certs, &why)) GTEST_SKIP() << why;
  ServerProcess server;
  ASSERT_TRUE(
      StartServer(&server, {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key}))
      << server.stderr_text;
  const auto [host, port] = HostPort(server.http_address);
  httplib::SSLClient https(host, port);
  https.set_ca_cert_path(certs.ca.c_str());
  https.enable_server_certificate_verification(true);
  https.set_read_timeout(10, 0);
  auto ok = https.Get("/healthz");
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200);
  // A plaintext client gets no page.
  httplib::Client plain(host, port);
  plain.set_read_timeout(5, 0);
  auto refused = plain.Get("/healthz");
  EXPECT_TRUE(!refused || refused->status != 200);
  // A client trusting another CA refuses the server.
  httplib::SSLClient other(host, port);
  other.set_ca_cert_path(certs.other_ca.c_str());
  other.enable_server_certificate_verification(true);
  EXPECT_FALSE(other.Get("/healthz"));
}

TEST_F(HttpMetricsTest, MutualTlsRefusesClientsWithoutCertificate) {
  testing::TestCerts certs;
  std::string why;
  if (!testing::MakeTestCerts(dir_, &certs, &why)) GTEST_SKIP() << why;
  ServerProcess server;
  ASSERT_TRUE(StartServer(&server, {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key,
                                    "--tls-client-ca", certs.ca}))
      << server.stderr_text;
  const auto [host, port] = HostPort(server.http_address);
  httplib::SSLClient anonymous(host, port);
  anonymous.set_ca_cert_path(certs.ca.c_str());
  anonymous.set_read_timeout(5, 0);
  auto refused = anonymous.Get("/healthz");
  EXPECT_TRUE(!refused || refused->status != 200);
  httplib::SSLClient with_cert(host, port, certs.client_cert, certs.client_key);
  with_cert.set_ca_cert_path(certs.ca.c_str());
  with_cert.set_read_timeout(10, 0);
  auto ok = with_cert.Get("/healthz");
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpMetricsTest, HttpAddressBeyondLoopbackNeedsTlsAndTokens) {
  // gRPC stays on loopback; the HTTP address alone is refused before binding.
  ServerProcess server;
  EXPECT_FALSE(server.Start(
      {"--listen", "127.0.0.1:0", "--http-listen", "0.0.0.0:0", "--data-dir", dir_ + "/data"}));
  const int status = server.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  EXPECT_NE(server.stderr_text.find("refusing to listen on 0.0.0.0:0"), std::string::npos)
      << server.stderr_text;
  EXPECT_NE(server.stderr_text.find("--auth-tokens"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/data"));  // refused before touching data
}

}  // namespace
}  // namespace tensorkeep
