// Test helpers: an in-process collector on port 0 in a fresh temporary
// directory, and records with known contents.
#ifndef TENSORKEEP_TESTS_SERVER_TEST_SERVER_H_
#define TENSORKEEP_TESTS_SERVER_TEST_SERVER_H_

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/connection.h"
#include "client/trial.h"
#include "client/writer.h"
#include "gtest/gtest.h"
#include "server/collector_server.h"

namespace tensorkeep {
namespace testing {

inline std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = std::filesystem::temp_directory_path().string() + "/tk_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* dir = mkdtemp(buf.data());
  EXPECT_NE(dir, nullptr);
  return dir == nullptr ? "" : std::string(dir);
}

// Starts a collector with `options` on a free loopback port and connects to
// it (replacing what `server` and `connection` held).
inline void StartServer(ServerOptions options, std::unique_ptr<CollectorServer>* server,
                        std::shared_ptr<Connection>* connection) {
  server->reset();
  options.listen = "127.0.0.1:0";
  auto s = CollectorServer::Start(options);
  ASSERT_TRUE(s.ok()) << s.status();
  *server = std::move(*s);
  auto c = Connection::Open((*server)->address());
  ASSERT_TRUE(c.ok());
  *connection = *c;
}

// A writer of (trial, worker) to the collector at `address`; null (and a
// test failure) if it cannot open.
inline std::unique_ptr<client::Writer> OpenWriter(const std::string& address,
                                                  const std::string& trial,
                                                  const std::string& worker = "worker_0",
                                                  uint32_t num_workers = 1) {
  client::WriterOptions o;
  o.server = address;
  o.trial = trial;
  o.worker = worker;
  o.num_workers = num_workers;
  auto w = client::Writer::Open(o);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("server");
    Restart();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  // (Re)starts the server on the same data directory.
  void Restart() {
    ServerOptions o;
    o.store.path = dir_ + "/db";
    StartServer(o, &server_, &connection_);
  }
  std::unique_ptr<client::Writer> OpenWriter(const std::string& trial,
                                             const std::string& worker = "worker_0",
                                             uint32_t num_workers = 1) {
    return testing::OpenWriter(server_->address(), trial, worker, num_workers);
  }
  client::Trial TrialOf(const std::string& name) { return client::Trial(connection_, name); }

  std::string dir_;
  std::unique_ptr<CollectorServer> server_;
  std::shared_ptr<Connection> connection_;
};

// A float32 record of `n` values from a seeded generator.
inline v1::TensorRecord Float32Record(const std::string& name, uint64_t step, int n, uint32_t seed,
                                      int mode = 1, int64_t mode_step = -1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.5f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  v1::TensorRecord r;
  r.set_name(name);
  r.set_step(step);
  r.set_mode(static_cast<v1::Mode>(mode));
  r.set_mode_step(mode_step < 0 ? step : static_cast<uint64_t>(mode_step));
  r.set_dtype(v1::FLOAT32);
  r.add_shape(n);
  r.set_has_value(true);
  r.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  return r;
}

inline std::vector<float> AsFloats(const std::string& data) {
  std::vector<float> v(data.size() / sizeof(float));
  std::memcpy(v.data(), data.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace testing
}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_SERVER_TEST_SERVER_H_
