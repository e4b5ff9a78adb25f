// ApiV1: the JSON API under /api/v1/ (docs/http-api.md) that the web UI and
// scripts read: trials, one trial, tensor names, reduction series (min/max
// envelope downsampling, step-range zoom), distributions over steps
// (percentile bands and histograms), one step's histogram, and live updates
// as server-sent events woken by commits (Trial::Watch, as WatchSteps),
// never by polling the store.
//
// Every route needs the read role (with tokens) and checks the trial against
// the token's prefixes; every request's work is bounded by proto/limits.proto
// (MAX_VIEW_*, MAX_DISTRIBUTION_STEPS, MAX_EVENT_STREAMS).
//
// Thread safety: thread-safe; StopStreams() ends the open event streams (the
// collector's shutdown, before the HTTP server stops).
#ifndef TENSORKEEP_SERVER_HTTP_API_V1_H_
#define TENSORKEEP_SERVER_HTTP_API_V1_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include "server/collector.h"
#include "server/http/http_server.h"
#include "server/views/tensor_views.h"

namespace tensorkeep {

struct ApiOptions {
  // The views' cache (server/views/view_cache.h), from the memory budget.
  size_t cache_bytes = 64u << 20;
  // An event stream sends a comment this often when nothing changed (so
  // proxies keep it open and a gone client is noticed), and ends after
  // max_stream_seconds (EventSource reconnects by itself).
  double heartbeat_seconds = 15;
  double max_stream_seconds = 600;
};

class ApiV1 {
 public:
  // `collector` and `http` are not owned and must outlive the API.
  ApiV1(Collector* collector, HttpServer* http, const ApiOptions& options = {});
  ~ApiV1();

  // Wakes and ends every open event stream; later ones are refused.
  void StopStreams();
  // Event streams open now.
  int open_streams() const { return streams_.load(); }

 private:
  struct Stream;
  void Register();
  // Counts `stream` against MAX_EVENT_STREAMS and calls `subscribe` (which
  // sets its subscription), or fails.
  absl::Status Open(const std::shared_ptr<Stream>& stream,
                    const std::function<absl::Status()>& subscribe);
  // Streams `events(first)` (the event text to send, or "" for nothing new)
  // each time `stream` wakes: a keep-alive comment after heartbeat_seconds
  // of nothing, the end after max_stream_seconds or at StopStreams.
  void Serve(httplib::Response& res, const std::shared_ptr<Stream>& stream,
             std::function<std::string(bool first)> events);
  // /api/v1/events without a trial: every trial the caller sees.
  absl::Status ServeTrialList(const CallAccess& access, httplib::Response& res);

  Collector* const collector_;
  HttpServer* const http_;
  const ApiOptions options_;
  TensorViews views_;
  std::atomic<int> streams_{0};
  std::mutex mu_;
  std::set<std::shared_ptr<Stream>> live_;
  bool stopped_ = false;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_HTTP_API_V1_H_
