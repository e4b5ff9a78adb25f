// Slow and idle HTTP clients against a real tensorkeep-server process
// (server/http/connection_gate.h): more slowloris sockets than the HTTP
// port has worker threads (some send a request a byte at a time, some send
// nothing) are held open while a normal client's /healthz and /metrics keep
// answering; the server closes the slow ones once --http-request-timeout has
// passed; the per-address cap refuses one address's extra connections while
// another address is served; event streams (MAX_EVENT_STREAMS of them) and
// slow clients together still leave /healthz answering; the same over TLS.
//
// Bounds: every wait has a deadline; "answering within a bound" means within
// less than the request timeout, which is what a server whose threads were
// held by the slow sockets could not do (it would answer, at best, after the
// slow sockets were closed).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/limits.pb.h"
#include "tests/server/server_process.h"
#include "tests/server/test_certs.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ServerProcess;

std::pair<std::string, int> HostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  return {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A TCP connection to `port` on 127.0.0.1 from `source` (any 127/8 address
// is loopback on Linux); -1 on failure.
int Connect(int port, const char* source = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` (end of stream or reset), waiting at most
// `seconds`. Data the server sent first (a refusal) is skipped.
bool ClosedByServer(int fd, double seconds, std::string* received = nullptr) {
  const auto until = Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;  // EOF or ECONNRESET
    if (received != nullptr) received->append(buf, n);
  }
}

// Still open: nothing to read and no end of stream, right now.
bool StillOpen(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// GET `path` over a fresh connection from `source`; the status code, or -1.
int RawGetStatus(int port, const std::string& path, const char* source) {
  const int fd = Connect(port, source);
  if (fd < 0) return -1;
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
  std::string reply;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    ClosedByServer(fd, 10, &reply);
  }
  close(fd);
  int status = -1;
  if (reply.rfind("HTTP/1.1 ", 0) == 0) status = std::atoi(reply.c_str() + 9);
  return status;
}

// Slowloris: `silent` sockets that send nothing and `trickling` ones that
// send a request's first line and then a header byte every 100 ms (never
// the blank line that ends the headers), until Stop().
class Slowloris {
 public:
  bool Open(int port, int silent, int trickling) {
    opened_ = Clock::now();
    for (int i = 0; i < silent + trickling; ++i) {
      const int fd = Connect(port);
      if (fd < 0) return false;
      fds_.push_back(fd);
      if (i >= silent) {
        const std::string start = "GET /healthz HTTP/1.1\r\nHost: test\r\nX-Slow: ";
        if (send(fd, start.data(), start.size(), MSG_NOSIGNAL) < 0) return false;
        trickling_.push_back(fd);
      }
    }
    thread_ = std::thread([this] {
      // Bounded: at most 600 rounds (60 s), ended by Stop() long before.
      for (int round = 0; round < 600 && !stop_.load(); ++round) {
        for (int fd : trickling_) (void)send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    return true;
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  ~Slowloris() {
    Stop();
    for (int fd : fds_) close(fd);
  }
  const std::vector<int>& fds() const { return fds_; }
  Clock::time_point opened() const { return opened_; }

 private:
  std::vector<int> fds_, trickling_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  Clock::time_point opened_;
};

class HttpSlowClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    dir_ = testing::MakeTempDir("http-slow");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  bool StartServer(ServerProcess* p, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--listen",   "127.0.0.1:0",  "--http-listen", "127.0.0.1:0",
                                     "--data-dir", dir_ + "/data", "--log-level",   "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    return p->Start(args);
  }

  std::string dir_;
};

constexpr int kWorkerThreads = 16;  // HttpOptions::threads

TEST_F(HttpSlowClientsTest, SlowlorisHoldsNoWorkerAndIsClosedAtTheRequestTimeout) {
  constexpr double kRequestTimeout = 6;
  ServerProcess server;
  ASSERT_TRUE(StartServer(&server, {"--http-request-timeout", "6"})) << server.stderr_text;
  const auto [host, port] = HostPort(server.http_address);

  Slowloris slow;
  ASSERT_TRUE(slow.Open(port, /*silent=*/kWorkerThreads, /*trickling=*/kWorkerThreads + 8));
  ASSERT_GT(static_cast<int>(slow.fds().size()), kWorkerThreads);

  // A normal client, on connections of its own, while all of them are held.
  httplib::Client http(host, port);
  http.set_connection_timeout(5, 0);
  http.set_read_timeout(5, 0);
  for (int i = 0; i < 5; ++i) {
    for (const char* path : {"/healthz", "/metrics"}) {
      const auto start = Clock::now();
      auto res = http.Get(path);
      ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
      EXPECT_EQ(res->status, 200) << path;
      EXPECT_LT(SecondsSince(start), kRequestTimeout / 2) << path << " waited for slow clients";
    }
  }
  // The slow sockets were open all along (else the above proved nothing).
  if (SecondsSince(slow.opened()) >= kRequestTimeout) {
    GTEST_SKIP() << "the machine was too slow to check within the request timeout";
  }
  for (int fd : slow.fds()) EXPECT_TRUE(StillOpen(fd));

  // The server closes every one of them at the request timeout, trickling
  // or not: not before (they were checked open above), not long after.
  for (int fd : slow.fds()) {
    const double waited = SecondsSince(slow.opened());
    EXPECT_TRUE(ClosedByServer(fd, std::max(0.0, kRequestTimeout + 5 - waited)))
        << "a slow client still open " << SecondsSince(slow.opened()) << " s after connecting";
  }
  EXPECT_GE(SecondsSince(slow.opened()), kRequestTimeout - 0.5);
  slow.Stop();
  auto after = http.Get("/healthz");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
}

TEST_F(HttpSlowClientsTest, PerAddressCapRefusesExtraConnectionsOthersServed) {
  ServerProcess server;
  ASSERT_TRUE(StartServer(&server, {"--http-max-connections-per-address", "8"}))
      << server.stderr_text;
  const auto [host, port] = HostPort(server.http_address);
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(Connect(port, "127.0.0.2"));
    ASSERT_GE(held.back(), 0);
  }
  // The gate counts a connection once it has taken it: wait (bounded) until
  // the ninth from the same address is refused, with a 503 saying why.
  std::string reply;
  bool refused = false;
  for (int attempt = 0; attempt < 50 && !refused; ++attempt) {
    const int fd = Connect(port, "127.0.0.2");
    ASSERT_GE(fd, 0);
    reply.clear();
    refused = ClosedByServer(fd, 0.2, &reply);
    close(fd);
  }
  ASSERT_TRUE(refused) << "a ninth connection from 127.0.0.2 was kept open";
  EXPECT_EQ(reply.rfind("HTTP/1.1 503", 0), 0u) << reply;
  EXPECT_NE(reply.find("--http-max-connections-per-address"), std::string::npos) << reply;
  // Another address is served.
  EXPECT_EQ(RawGetStatus(port, "/healthz", "127.0.0.1"), 200);
  // Closing one of the eight lets the address in again (bounded wait).
  close(held.back());
  held.pop_back();
  int status = -1;
  for (int attempt = 0; attempt < 50 && status != 200; ++attempt) {
    status = RawGetStatus(port, "/healthz", "127.0.0.2");
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 200);
  for (int fd : held) close(fd);
}

TEST_F(HttpSlowClientsTest, OversizedAndChunkedRequestsAreRefusedWithoutAWorker) {
  ServerProcess server;
  ASSERT_TRUE(StartServer(&server, {})) << server.stderr_text;
  const auto [host, port] = HostPort(server.http_address);
  struct Case {
    std::string request;
    const char* status;
  };
  const std::vector<Case> cases = {
      {"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n", "413"},
      {"GET /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n", "411"},
      {"GET /healthz HTTP/1.1\r\nHost: t\r\nX: " + std::string(20000, 'a'), "431"},
  };
  for (const Case& c : cases) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, c.request.data(), c.request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(c.request.size()));
    std::string reply;
    EXPECT_TRUE(ClosedByServer(fd, 10, &reply));
    close(fd);
    EXPECT_EQ(reply.rfind(std::string("HTTP/1.1 ") + c.status, 0), 0u) << reply.substr(0, 200);
  }
  // A whole request with a small body is served.
  const int fd = Connect(port);
  const std::string ok =
      "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc";
  ASSERT_EQ(send(fd, ok.data(), ok.size(), MSG_NOSIGNAL), static_cast<ssize_t>(ok.size()));
  std::string reply;
  EXPECT_TRUE(ClosedByServer(fd, 10, &reply));
  close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply.substr(0, 200);
}

TEST_F(HttpSlowClientsTest, EventStreamsAndSlowClientsLeaveHealthAnswering) {
  ServerProcess server;
  ASSERT_TRUE(StartServer(&server, {"--http-request-timeout", "6"})) << server.stderr_text;
  const auto [host, port] = HostPort(server.http_address);
  // MAX_EVENT_STREAMS event streams, each holding a worker.
  std::vector<int> streams;
  for (int i = 0; i < v1::MAX_EVENT_STREAMS; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    const std::string request = "GET /api/v1/events HTTP/1.1\r\nHost: t\r\n\r\n";
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    // The stream's headers arrive: it holds its worker now.
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1);
    char buf[512];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    EXPECT_EQ(std::string(buf, n).rfind("HTTP/1.1 200", 0), 0u) << std::string(buf, n);
    streams.push_back(fd);
  }
  Slowloris slow;
  ASSERT_TRUE(slow.Open(port, 8, kWorkerThreads));
  httplib::Client http(host, port);
  http.set_read_timeout(5, 0);
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    auto res = http.Get("/healthz");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_LT(SecondsSince(start), 3.0);
  }
  // One more event stream is refused (429, MAX_EVENT_STREAMS), not queued.
  EXPECT_EQ(RawGetStatus(port, "/api/v1/events", "127.0.0.1"), 429);
  for (int fd : streams) close(fd);
}

TEST_F(HttpSlowClientsTest, SilentTlsClientsHoldNoWorker) {
  testing::TestCerts certs;
  std::string why;
  if (!testing::MakeTestCerts(dir_, &certs, &why)) GTEST_SKIP() << why;
  ServerProcess server;
  ASSERT_TRUE(StartServer(&server, {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key,
                                    "--http-request-timeout", "6"}))
      << server.stderr_text;
  const auto [host, port] = HostPort(server.http_address);
  // Silent (no ClientHello) and half a ClientHello.
  Slowloris slow;
  ASSERT_TRUE(slow.Open(port, kWorkerThreads + 4, 0));
  std::vector<int> partial;
  for (int i = 0; i < 8; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    const unsigned char hello_start[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};
    ASSERT_EQ(send(fd, hello_start, sizeof(hello_start), MSG_NOSIGNAL), 6);
    partial.push_back(fd);
  }
  httplib::SSLClient https(host, port);
  https.set_ca_cert_path(certs.ca.c_str());
  https.enable_server_certificate_verification(true);
  https.set_read_timeout(5, 0);
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    auto res = https.Get("/healthz");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_LT(SecondsSince(start), 3.0);
  }
  if (SecondsSince(slow.opened()) >= 6.0) {
    GTEST_SKIP() << "the machine was too slow to check within the request timeout";
  }
  for (int fd : slow.fds()) EXPECT_TRUE(StillOpen(fd));
  for (int fd : partial) EXPECT_TRUE(StillOpen(fd));
  for (int fd : partial) {
    EXPECT_TRUE(ClosedByServer(fd, std::max(0.0, 11 - SecondsSince(slow.opened()))));
    close(fd);
  }
}

}  // namespace
}  // namespace tensorkeep
