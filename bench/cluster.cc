#include "bench/cluster.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/rendezvous.h"
#include "base/status_macros.h"
#include "bench/percentile.h"
#include "bench/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "proto/tensorkeep.grpc.pb.h"

namespace tensorkeep {
namespace bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// What every writer of a phase shares: the payload, and the count of
// streams still running.
struct Shared {
  std::string payload;
  int steps = 0;
  int window = 0;
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
};

// One simulated writer: a Push stream of its own trial, as a gRPC callback
// reactor (its callbacks run on gRPC's threads).
class SimWriter : public grpc::ClientBidiReactor<v1::PushRequest, v1::PushResponse> {
 public:
  SimWriter(Shared* shared, std::string trial) : shared_(shared), trial_(std::move(trial)) {
    // Open, (records, EndStep) per step, Close.
    last_seq_ = 2 + 2 * static_cast<uint64_t>(shared_->steps);
    sent_at_.resize(last_seq_ + 1);
  }

  void Start(v1::TensorKeep::Stub* stub) {
    stub->async()->Push(&context_, this);
    StartRead(&response_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      SendLocked();
    }
    StartCall();
  }

  void Cancel() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) return;  // the stream is broken: OnDone says why
    if (next_seq_ > last_seq_) {
      if (!writes_done_) {
        writes_done_ = true;
        StartWritesDone();
      }
      return;
    }
    SendLocked();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      const uint64_t acked = std::min<uint64_t>(response_.acked_seq(), next_seq_ - 1);
      for (uint64_t s = acked_ + 1; s <= acked; ++s) {
        // Record messages: seq 2, 4, ... (EndStep after each).
        if (s >= 2 && s < last_seq_ && s % 2 == 0) {
          latencies_.push_back(std::chrono::duration<double>(now - sent_at_[s]).count());
        }
      }
      acked_ = std::max(acked_, acked);
      if (!writing_ && next_seq_ <= last_seq_) SendLocked();
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = status;
      complete_ = status.ok() && acked_ >= last_seq_;
    }
    std::lock_guard<std::mutex> lock(shared_->mu);
    --shared_->running;
    shared_->cv.notify_all();
  }

  // After OnDone.
  bool complete() const { return complete_; }
  const grpc::Status& status() const { return status_; }
  const std::vector<double>& latencies() const { return latencies_; }

 private:
  // Sends the next message if the window allows (requires mu_).
  void SendLocked() {
    if (writing_ || next_seq_ > last_seq_) return;
    if (next_seq_ - 1 - acked_ >= static_cast<uint64_t>(shared_->window)) return;
    request_.Clear();
    const uint64_t seq = next_seq_++;
    request_.set_seq(seq);
    if (seq == 1) {
      auto* open = request_.mutable_open();
      open->set_trial(trial_);
      open->set_worker("worker_0");
      open->set_num_workers(1);
    } else if (seq == last_seq_) {
      request_.mutable_close()->set_end_of_training(true);
    } else {
      const uint64_t step = (seq - 2) / 2;
      if (seq % 2 == 0) {
        auto* r = request_.mutable_records()->add_records();
        r->set_name("w");
        r->set_step(step);
        r->set_mode(v1::TRAIN);
        r->set_mode_step(step);
        r->set_dtype(v1::UINT8);
        r->add_shape(static_cast<int64_t>(shared_->payload.size()));
        r->set_data(shared_->payload);
        r->set_value_size(shared_->payload.size());
        r->set_has_value(true);
      } else {
        request_.mutable_end_step()->set_step(step);
      }
    }
    sent_at_[seq] = Clock::now();
    writing_ = true;
    StartWrite(&request_);
  }

  Shared* const shared_;
  const std::string trial_;
  grpc::ClientContext context_;
  v1::PushResponse response_;
  std::mutex mu_;
  v1::PushRequest request_;
  uint64_t last_seq_ = 0;
  uint64_t next_seq_ = 1;
  uint64_t acked_ = 0;
  bool writing_ = false;
  bool writes_done_ = false;
  std::vector<Clock::time_point> sent_at_;
  std::vector<double> latencies_;
  grpc::Status status_;
  bool complete_ = false;
};

// Ports free now on loopback (the collectors of a cluster must know each
// other's addresses before they start).
absl::StatusOr<std::vector<int>> FreePorts(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    fds.push_back(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      break;
    }
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) close(fd);
  if (static_cast<int>(ports.size()) != n) return absl::InternalError("no free loopback port");
  return ports;
}

struct PhaseResult {
  double seconds = 0;
  uint64_t bytes = 0;
  std::vector<double> latencies;
  std::map<std::string, uint64_t> bytes_on;   // collector -> value bytes routed to it
  std::map<std::string, uint64_t> trials_on;  // collector -> trials in its own listing
};

// Runs every writer against `addresses` (a cluster when more than one).
absl::StatusOr<PhaseResult> RunPhase(const ClusterBenchOptions& o,
                                     const std::vector<std::string>& addresses,
                                     const std::string& tag) {
  std::map<std::string, std::vector<std::unique_ptr<v1::TensorKeep::Stub>>> stubs;
  for (const auto& a : addresses) {
    for (int c = 0; c < o.channels_per_collector; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("tk.bench_channel", c);  // distinct args: a connection of its own
      args.SetMaxSendMessageSize(64 << 20);
      stubs[a].push_back(v1::TensorKeep::NewStub(
          grpc::CreateCustomChannel(a, grpc::InsecureChannelCredentials(), args)));
    }
  }
  Shared shared;
  shared.payload.assign(o.value_bytes, '\0');
  for (size_t i = 0; i < shared.payload.size(); ++i) shared.payload[i] = static_cast<char>(i * 31);
  shared.steps = o.steps;
  shared.window = std::max(2, o.window);
  PhaseResult out;
  std::vector<std::unique_ptr<SimWriter>> writers;
  std::vector<std::pair<std::string, v1::TensorKeep::Stub*>> routes;
  for (int i = 0; i < o.writers; ++i) {
    const std::string trial = absl::StrCat("bench-cluster-", tag, "-", i);
    const std::string owner =
        addresses.size() == 1 ? addresses[0] : RendezvousOwner(addresses, trial);
    auto& s = stubs[owner];
    routes.emplace_back(owner, s[static_cast<size_t>(i) % s.size()].get());
    writers.push_back(std::make_unique<SimWriter>(&shared, trial));
    out.bytes_on[owner] += o.value_bytes * static_cast<uint64_t>(o.steps);
  }
  shared.running = o.writers;
  const auto start = Clock::now();
  for (int i = 0; i < o.writers; ++i) writers[i]->Start(routes[i].second);
  {
    std::unique_lock<std::mutex> lock(shared.mu);
    const auto deadline = start + std::chrono::duration<double>(o.timeout_seconds);
    if (!shared.cv.wait_until(lock, deadline, [&] { return shared.running == 0; })) {
      lock.unlock();
      for (auto& w : writers) w->Cancel();
      lock.lock();
      shared.cv.wait(lock, [&] { return shared.running == 0; });
      return absl::DeadlineExceededError(absl::StrCat(
          "cluster bench: ", o.writers, " writers did not finish within ", o.timeout_seconds, " s"));
    }
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  int failed = 0;
  std::string first_error;
  for (auto& w : writers) {
    if (!w->complete()) {
      if (failed++ == 0) first_error = w->status().error_message();
      continue;
    }
    out.latencies.insert(out.latencies.end(), w->latencies().begin(), w->latencies().end());
  }
  if (failed > 0) {
    return absl::InternalError(absl::StrCat("cluster bench: ", failed, " of ", o.writers,
                                            " writers failed, the first: ", first_error));
  }
  out.bytes = o.value_bytes * static_cast<uint64_t>(o.steps) * static_cast<uint64_t>(o.writers);
  // Each collector's own listing.
  for (const auto& a : addresses) {
    grpc::ClientContext cc;
    cc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ListTrialsResponse listed;
    grpc::Status s = stubs[a].front()->ListTrials(&cc, v1::ListTrialsRequest(), &listed);
    if (!s.ok()) return absl::InternalError(absl::StrCat("ListTrials on ", a, ": ", s.error_message()));
    uint64_t ended = 0;
    for (const auto& t : listed.trials()) ended += t.ended() && t.num_steps() == static_cast<uint64_t>(o.steps);
    out.trials_on[a] = ended;
  }
  return out;
}

// Starts `n` collectors (a cluster when n > 1) under `dir`.
absl::StatusOr<std::vector<ServerProcess>> StartCollectors(const ClusterBenchOptions& o,
                                                           const std::string& dir, int n,
                                                           std::vector<std::string>* addresses) {
  TK_ASSIGN_OR_RETURN(std::vector<int> ports, FreePorts(n));
  addresses->clear();
  for (int p : ports) addresses->push_back(absl::StrCat("127.0.0.1:", p));
  const std::string list = absl::StrJoin(*addresses, ",");
  std::vector<ServerProcess> out;
  for (int i = 0; i < n; ++i) {
    const std::string data = absl::StrCat(dir, "/c", i);
    fs::create_directories(data);
    std::vector<std::string> extra = {"--listen", (*addresses)[i]};
    if (n > 1) extra.insert(extra.end(), {"--cluster", list, "--advertise", (*addresses)[i]});
    TK_ASSIGN_OR_RETURN(ServerProcess s, SpawnServer(o.server_binary, data, extra));
    out.push_back(std::move(s));
  }
  return out;
}

void StopCollectors(std::vector<ServerProcess>* servers) {
  for (auto& s : *servers) s.process->Signal(SIGTERM);
  for (auto& s : *servers) s.process->Wait(30);
  servers->clear();
}

std::string Mib(uint64_t b) { return absl::StrFormat("%.1f MiB", b / 1048576.0); }

}  // namespace

absl::StatusOr<std::vector<Result>> RunClusterBench(const ClusterBenchOptions& o) {
  fs::create_directories(o.data_dir);
  auto phase = [&](int n, const std::string& tag) -> absl::StatusOr<PhaseResult> {
    std::vector<std::string> addresses;
    TK_ASSIGN_OR_RETURN(auto servers,
                        StartCollectors(o, absl::StrCat(o.data_dir, "/", tag), n, &addresses));
    auto r = RunPhase(o, addresses, tag);
    StopCollectors(&servers);
    return r;
  };
  auto single = phase(1, "one");
  auto many = single.ok() ? phase(o.collectors, "many") : single;
  std::error_code ec;
  fs::remove_all(o.data_dir, ec);
  TK_RETURN_IF_ERROR(single.status());
  TK_RETURN_IF_ERROR(many.status());
  const double one_mbps = single->bytes / 1e6 / single->seconds;
  const double mbps = many->bytes / 1e6 / many->seconds;

  std::vector<Result> out;
  Result r;
  r.name = absl::StrCat("cluster/w", o.writers, "/c", o.collectors);
  r.value = mbps;
  r.unit = "MB/s";
  r.figure_text = absl::StrFormat("%.1f MB/s %.2f s", mbps, many->seconds);
  r.baseline_name = "one collector";
  r.baseline = one_mbps;
  r.baseline_text = absl::StrFormat("%.1f MB/s %.2f s", one_mbps, single->seconds);
  r.extra = {{"MBps", mbps},
             {"one_collector_MBps", one_mbps},
             {"seconds", many->seconds},
             {"one_collector_seconds", single->seconds},
             {"writers", static_cast<double>(o.writers)},
             {"value_bytes", static_cast<double>(o.value_bytes)},
             {"steps", static_cast<double>(o.steps)}};
  out.push_back(std::move(r));

  Result lat;
  lat.name = absl::StrCat("cluster/p99-ack/w", o.writers, "/c", o.collectors);
  lat.value = Percentile(many->latencies, 0.99) * 1e3;
  lat.unit = "ms";
  lat.figure_text =
      absl::StrFormat("p99 %.1f ms p50 %.1f ms", lat.value, Percentile(many->latencies, 0.5) * 1e3);
  lat.baseline_name = "one collector";
  lat.baseline = Percentile(single->latencies, 0.99) * 1e3;
  lat.baseline_text = absl::StrFormat("p99 %.1f ms p50 %.1f ms", lat.baseline,
                                      Percentile(single->latencies, 0.5) * 1e3);
  lat.extra = {{"p99_ms", lat.value},
               {"p50_ms", Percentile(many->latencies, 0.5) * 1e3},
               {"one_collector_p99_ms", lat.baseline},
               {"one_collector_p50_ms", Percentile(single->latencies, 0.5) * 1e3},
               {"acks", static_cast<double>(many->latencies.size())}};
  out.push_back(std::move(lat));

  uint64_t max_t = 0, min_t = UINT64_MAX, max_b = 0, min_b = UINT64_MAX, listed = 0;
  for (const auto& [a, t] : many->trials_on) {
    max_t = std::max(max_t, t);
    min_t = std::min(min_t, t);
    listed += t;
  }
  for (const auto& [a, b] : many->bytes_on) {
    max_b = std::max(max_b, b);
    min_b = std::min(min_b, b);
  }
  if (many->bytes_on.size() < static_cast<size_t>(o.collectors)) min_b = 0;
  if (listed != static_cast<uint64_t>(o.writers)) {
    return absl::DataLossError(absl::StrCat("cluster bench: the collectors list ", listed,
                                            " complete trials, ", o.writers, " were written"));
  }
  Result bal;
  bal.name = absl::StrCat("cluster/balance/c", o.collectors);
  bal.value = min_b > 0 ? static_cast<double>(max_b) / static_cast<double>(min_b) : NAN;
  bal.unit = "x";
  bal.figure_text = absl::StrFormat("max/min %.2fx trials %d..%d bytes %s..%s", bal.value, min_t,
                                    max_t, Mib(min_b), Mib(max_b));
  bal.extra = {{"max_trials", static_cast<double>(max_t)},
               {"min_trials", static_cast<double>(min_t)},
               {"max_MiB", max_b / 1048576.0},
               {"min_MiB", min_b / 1048576.0}};
  out.push_back(std::move(bal));
  return out;
}

}  // namespace bench
}  // namespace tensorkeep
