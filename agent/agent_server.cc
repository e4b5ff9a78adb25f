#include "agent/agent_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/deadline.h"
#include "agent/handover.h"
#include "agent/journal_replay.h"
#include "agent/session.h"
#include "base/process_tuning.h"
#include "spdlog/spdlog.h"

namespace tensorkeep {
namespace agent {
namespace {

constexpr int kAcceptPollMs = 200;
constexpr std::chrono::seconds kReturnHeapAfter{2};

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Tells a client it cannot be served (it waits for the reply to its Open).
void Refuse(int fd, const absl::Status& status) {
  std::string out;
  const uint32_t type = kReply, ok = 0;
  const uint64_t id = 0;
  const int32_t code = static_cast<int32_t>(status.code());
  const uint32_t no_reason = 0, len = status.message().size();
  out.append(reinterpret_cast<const char*>(&type), 4);
  out.append(reinterpret_cast<const char*>(&ok), 4);
  out.append(reinterpret_cast<const char*>(&id), 8);
  out.append(reinterpret_cast<const char*>(&code), 4);
  out.append(reinterpret_cast<const char*>(&no_reason), 4);
  out.append(reinterpret_cast<const char*>(&len), 4);
  out.append(status.message().data(), status.message().size());
  (void)send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  close(fd);
}

}  // namespace

std::string DefaultSocketPath() {
  if (const char* p = std::getenv("TENSORKEEP_AGENT_SOCKET"); p != nullptr && *p != '\0') return p;
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d != '\0') {
    return absl::StrCat(d, "/tensorkeep/agent-v", kProtocolVersion, ".sock");
  }
  return absl::StrCat("/tmp/tensorkeep-", getuid(), "/agent-v", kProtocolVersion, ".sock");
}

AgentServer::AgentServer(AgentOptions options)
    : options_(std::move(options)),
      budget_(options_.memory_budget_bytes),
      journal_space_(options_.journal_max_bytes) {
  if (options_.socket_path.empty()) options_.socket_path = DefaultSocketPath();
  if (options_.journal_dir.empty()) {
    const char* d = std::getenv("TENSORKEEP_AGENT_JOURNAL_DIR");
    if (d != nullptr && *d != '\0') {
      options_.journal_dir = d;
    } else {
      const size_t slash = options_.socket_path.rfind('/');
      options_.journal_dir =
          slash == std::string::npos ? "journal"
                                     : options_.socket_path.substr(0, slash + 1) + "journal";
    }
  }
  journal_settings_.dir = options_.journal_dir;
  journal_settings_.space = &journal_space_;
}

AgentServer::~AgentServer() {
  if (listen_fd_ >= 0) close(listen_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
}

absl::StatusOr<AgentServer::Bound> AgentServer::Bind() {
  const std::string& path = options_.socket_path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' is longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Errno(absl::StrCat("mkdir ", dir));
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return Errno(absl::StrCat("stat ", dir));
  if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("the agent's directory ", dir, " must be a directory owned by this user (uid ",
                     getuid(), ") that others cannot enter (mode 0700); it is owned by uid ",
                     st.st_uid, " with mode ", absl::StrFormat("%o", st.st_mode & 0777)));
  }
  const std::string lock_path = path + ".lock";
  lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return Errno(absl::StrCat("open ", lock_path));
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return Bound::kAlreadyRunning;
    return Errno(absl::StrCat("flock ", lock_path));
  }
  unlink(path.c_str());  // a socket left by an agent that died
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Errno("socket");
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno(absl::StrCat("bind ", path));
  }
  if (chmod(path.c_str(), 0600) != 0) return Errno(absl::StrCat("chmod ", path));
  if (listen(listen_fd_, 128) != 0) return Errno("listen");
  return Bound::kListening;
}

void AgentServer::Serve() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point idle_since = Clock::now();
  // One thread a writer, replaying its journals in the order they were made
  // (one writer's journals in parallel would be two streams of one worker).
  std::map<std::string, std::vector<std::string>> by_writer;
  for (const std::string& path : LeftoverJournals(options_.journal_dir)) {
    by_writer[JournalWriterKey(path)].push_back(path);
  }
  for (auto& [key, paths] : by_writer) {
    Spawn([this, paths = std::move(paths)](uint64_t) { ReplayLeftovers(paths); });
  }
  // The heap's free memory goes back once no writer has been left for a
  // while (base/process_tuning.h, kReturnWhenAsked), not between one writer
  // and the next.
  bool heap_returned = true;
  Clock::time_point writer_seen = Clock::now();
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, kAcceptPollMs);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("poll on {}: {}", options_.socket_path, std::strerror(errno));
      break;
    }
    if (ready > 0) Accept();
    Reap();
    std::unique_lock<std::mutex> lock(mu_);
    const bool no_writer = sessions_.empty();
    // Orphans (their training process gone) do not keep the agent running.
    if (sessions_.size() > orphans_.load()) {
      idle_since = Clock::now();
    } else if (options_.idle_exit_seconds > 0 &&
               std::chrono::duration<double>(Clock::now() - idle_since).count() >=
                   options_.idle_exit_seconds) {
      spdlog::info("no training process for {} s: exiting", options_.idle_exit_seconds);
      break;
    }
    lock.unlock();
    if (!no_writer) {
      heap_returned = false;
      writer_seen = Clock::now();
    } else if (!heap_returned && Clock::now() - writer_seen >= kReturnHeapAfter) {
      heap_returned = true;
      const size_t bytes = tensorkeep::ReturnFreedMemory();
      spdlog::debug("no writer for {} s: gave back up to {} MB of freed memory",
                    std::chrono::duration<double>(kReturnHeapAfter).count(), bytes >> 20);
    }
  }
  // No new clients; the sessions end when their clients close or go away,
  // and only then is what they handed over pushed. Orphans journal what is
  // not durable yet and end.
  stopping_.store(true);
  unlink(options_.socket_path.c_str());
  close(listen_fd_);
  listen_fd_ = -1;
  std::unique_lock<std::mutex> lock(mu_);
  if (!sessions_.empty()) {
    spdlog::info("waiting for {} writer(s) to finish pushing", sessions_.size());
  }
  cv_.wait(lock, [&] { return sessions_.empty(); });
  lock.unlock();
  Reap();
}

void AgentServer::ReplayLeftovers(const std::vector<std::string>& paths) {
  // Counted as an orphan once released, so that a collector away for good
  // does not keep the agent running for ever.
  bool released = false;
  const auto release = [&] {
    if (!released) orphans_.fetch_add(1);
    released = true;
  };
  ReplayOptions replay;
  replay.linger_seconds = options_.linger_seconds;
  replay.stopping = &stopping_;
  replay.hold_seconds = options_.leftover_hold_seconds;
  replay.on_released = release;
  for (const std::string& path : paths) {
    while (!ReplayJournal(path, &journal_space_, replay) && !stopping_.load()) {
      // Refused for now: tried again later, without holding the agent.
      release();
      const auto again = DeadlineAfter(options_.leftover_retry_seconds);
      while (!stopping_.load() && std::chrono::steady_clock::now() < again) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kAcceptPollMs));
      }
    }
    if (stopping_.load()) break;
  }
  if (released) orphans_.fetch_sub(1);
}

void AgentServer::Accept() {
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
      spdlog::warn("accept: {}", std::strerror(errno));
      if (errno == EMFILE || errno == ENFILE) usleep(100000);
    }
    return;
  }
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != getuid()) {
    spdlog::warn("refused a client of uid {} (the agent serves uid {} only)", cred.uid, getuid());
    close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (sessions_.size() >= options_.max_clients) {
    Refuse(fd, absl::ResourceExhaustedError(
                   absl::StrCat("tensorkeep-agent serves at most ", options_.max_clients,
                                " writers at once (tensorkeep-agent --max-clients)")));
    return;
  }
  SpawnLocked([this, fd](uint64_t id) {
    Session session(fd, id, &budget_, options_.linger_seconds, &journal_settings_, &stopping_,
                    &orphans_);
    session.Run();
  });
}

void AgentServer::Spawn(std::function<void(uint64_t id)> work) {
  std::lock_guard<std::mutex> lock(mu_);
  SpawnLocked(std::move(work));
}

void AgentServer::SpawnLocked(std::function<void(uint64_t id)> work) {
  const uint64_t id = next_id_++;
  sessions_.emplace(id, std::thread([this, id, work = std::move(work)] {
                      work(id);
                      std::lock_guard<std::mutex> lock(mu_);
                      auto it = sessions_.find(id);
                      finished_.emplace(id, std::move(it->second));
                      sessions_.erase(it);
                      cv_.notify_all();
                    }));
}

void AgentServer::Reap() {
  std::map<uint64_t, std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(finished_);
  }
  for (auto& [id, t] : done) t.join();
}

}  // namespace agent
}  // namespace tensorkeep
