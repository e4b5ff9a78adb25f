#include "tfrecord/event_file_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tfrecord/record.h"

namespace tensorkeep {
namespace tfrecord {

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const std::string& dir,
                                                                         double wall_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  // TensorBoard orders a run's files by name; the pid keeps two writers
  // started in the same second apart.
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.",
                                        static_cast<int64_t>(wall_time), ".", host, ".", getpid());
  std::FILE* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> w(new EventFileWriter(path, f));
  tfevent::Event first;
  first.set_wall_time(wall_time);
  first.set_file_version("brain.Event:2");
  if (absl::Status s = w->Write(first); !s.ok()) return s;
  if (absl::Status s = w->Flush(); !s.ok()) return s;
  return w;
}

EventFileWriter::~EventFileWriter() { (void)Close(); }

absl::Status EventFileWriter::Write(const tfevent::Event& event) {
  if (file_ == nullptr) return absl::FailedPreconditionError(path_ + " is closed");
  AppendRecord(event.SerializeAsString(), PayloadCrc::kData, &buffer_);
  if (buffer_.size() >= (1u << 20)) return Flush();
  return absl::OkStatus();
}

absl::Status EventFileWriter::WriteScalar(const std::string& tag, int64_t step, double wall_time,
                                          float value) {
  tfevent::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  return Write(e);
}

absl::Status EventFileWriter::WriteHistogram(const std::string& tag, int64_t step, double wall_time,
                                             const tfevent::HistogramProto& histogram) {
  tfevent::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  *v->mutable_histo() = histogram;
  return Write(e);
}

absl::Status EventFileWriter::Flush() {
  if (file_ == nullptr) return absl::OkStatus();
  if (!buffer_.empty()) {
    if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
      return absl::InternalError(absl::StrCat("writing ", path_, ": ", std::strerror(errno)));
    }
    buffer_.clear();
  }
  if (std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("writing ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status EventFileWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  absl::Status s = Flush();
  if (std::fclose(file_) != 0 && s.ok()) {
    s = absl::InternalError(absl::StrCat("closing ", path_, ": ", std::strerror(errno)));
  }
  file_ = nullptr;
  return s;
}

}  // namespace tfrecord
}  // namespace tensorkeep
