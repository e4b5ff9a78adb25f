// smdebug's local trial layout (smdebug 1.0's FileWriter, IndexWriter and
// CollectionManager), as read by import-smdebug and written by export-smdebug:
//
//   DIR/events/<step:012>/<step:012>_<worker>.tfevents
//       TFRecord records (length CRC real, data CRC smdebug's placeholder),
//       one Event per tensor: step = global step, summary.value[0] = {tag:
//       the tensor's name, metadata.plugin_data: [{"mode_step", "<k>"},
//       {"mode", "<1-4>"}], tensor: TensorProto with tensor_content}. A saved
//       reduction is a tensor named smdebug/reductions/[abs_]<reduction>/<name>.
//   DIR/index/<step // 1000:09>/<step:012>_<worker>.json
//       {"meta": {"mode", "mode_step", "event_file_name"},
//        "tensor_payload": [{"tensorname", "start_idx", "length"}], "shape_payload": []}
//   DIR/collections/000000000/<worker>_collections.json
//       {"collections": {name: {name, include_regex, tensor_names, reduction_config,
//        save_config, save_histogram}}, "_meta": {"num_workers": N}}
//   DIR/training_job_end.ts   present once training ended
#ifndef TENSORKEEP_CLIENT_CLI_SMDEBUG_LAYOUT_H_
#define TENSORKEEP_CLIENT_CLI_SMDEBUG_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/tensorkeep.pb.h"
#include "proto/tfevent.pb.h"

namespace tensorkeep {
namespace cli {
namespace smdebug {

inline constexpr char kReductionsPrefix[] = "smdebug/reductions/";
inline constexpr char kModeStepPlugin[] = "mode_step";
inline constexpr char kModePlugin[] = "mode";
inline constexpr char kEndFile[] = "training_job_end.ts";

// "events/000000000012/000000000012_worker_0.tfevents" (relative to DIR).
std::string EventFilePath(uint64_t step, const std::string& worker);
// "index/000000000/000000000012_worker_0.json".
std::string IndexFilePath(uint64_t step, const std::string& worker);
// "collections/000000000/worker_0_collections.json".
std::string CollectionsFilePath(const std::string& worker);

// The step and worker of an event file's name ("000000000012_worker_0.tfevents").
struct StepFile {
  uint64_t step;
  std::string worker;
};
std::optional<StepFile> ParseEventFileName(const std::string& file_name);

// smdebug's name of a saved reduction and its inverse.
std::string ReductionTensorName(const std::string& tensor, const std::string& reduction, bool abs);
struct ReductionOf {
  std::string tensor;
  std::string reduction;
  bool abs;
};
std::optional<ReductionOf> ParseReductionTensorName(const std::string& name);

// TensorFlow's DataType of a tensorkeep dtype and back (nullopt: no equivalent).
std::optional<tfevent::DataType> ToDataType(v1::DType dtype);
std::optional<v1::DType> FromDataType(tfevent::DataType dtype);

}  // namespace smdebug
}  // namespace cli
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CLI_SMDEBUG_LAYOUT_H_
