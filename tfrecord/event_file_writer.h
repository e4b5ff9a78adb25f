// EventFileWriter: one TensorBoard event file (events.out.tfevents.<time>.<host>
// in a run directory), written as TensorFlow's EventsWriter does: TFRecord
// records with data CRCs, the first event carrying file_version
// "brain.Event:2".
//
// Every Flush() leaves whole records on disk (a reader sees a clean end, or a
// record cut mid-way if the process dies inside a write, which
// tfrecord::ScanRecords reports as truncated). Not thread-safe.
#ifndef TENSORKEEP_TFRECORD_EVENT_FILE_WRITER_H_
#define TENSORKEEP_TFRECORD_EVENT_FILE_WRITER_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/tfevent.pb.h"

namespace tensorkeep {
namespace tfrecord {

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(const std::string& dir,
                                                                 double wall_time);
  ~EventFileWriter();

  const std::string& path() const { return path_; }

  absl::Status Write(const tfevent::Event& event);
  absl::Status WriteScalar(const std::string& tag, int64_t step, double wall_time, float value);
  absl::Status WriteHistogram(const std::string& tag, int64_t step, double wall_time,
                              const tfevent::HistogramProto& histogram);
  // Writes buffered records to the file (fflush; no fsync).
  absl::Status Flush();
  absl::Status Close();

 private:
  EventFileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_;
  std::string buffer_;
};

}  // namespace tfrecord
}  // namespace tensorkeep

#endif  // TENSORKEEP_TFRECORD_EVENT_FILE_WRITER_H_
