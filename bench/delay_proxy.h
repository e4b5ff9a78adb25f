// DelayProxy: a TCP proxy on loopback that holds every byte for a fixed time
// in each direction, so that a client going through it sees a round trip of
// twice that delay: the bench's link with latency (this kernel has no netem).
//
// It does not limit bandwidth: each direction reads what arrives at once
// (stamped with its arrival time) and writes it out once its delay has
// passed, so the bytes "on the wire" are bandwidth x delay, as on a real link.
// One reader and one writer thread a direction a connection; meant for a few
// connections in a bench.
//
// Thread safety: Start and the destructor from one thread.
#ifndef TENSORKEEP_BENCH_DELAY_PROXY_H_
#define TENSORKEEP_BENCH_DELAY_PROXY_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorkeep {
namespace bench {

class DelayProxy {
 public:
  // Listens on 127.0.0.1 (a free port) and forwards each connection to
  // `upstream` (HOST:PORT on loopback), delaying each direction by
  // `one_way_seconds`.
  static absl::StatusOr<std::unique_ptr<DelayProxy>> Start(const std::string& upstream,
                                                           double one_way_seconds);
  // Closes every connection and joins every thread.
  ~DelayProxy();
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;

  // HOST:PORT to connect to.
  const std::string& address() const { return address_; }

 private:
  struct Pipe;
  DelayProxy() = default;
  void Accept();

  std::string address_;
  int upstream_port_ = 0;
  double delay_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Pipe>> pipes_;  // guarded by mu_
};

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_DELAY_PROXY_H_
