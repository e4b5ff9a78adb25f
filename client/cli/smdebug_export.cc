#include "client/cli/smdebug_export.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "client/cli/cli_errors.h"
#include "client/cli/collector_wait.h"
#include "client/cli/progress_bar.h"
#include "client/cli/smdebug_collections.h"
#include "client/cli/smdebug_layout.h"
#include "client/trial.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tfrecord/record.h"

namespace tensorkeep {
namespace cli {
namespace {

namespace fs = std::filesystem;

absl::Status WriteFile(const fs::path& path, const std::string& bytes) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot create ", path.parent_path().string(), ": ", ec.message()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out);
  return out;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One event file and its index, as smdebug's FileWriter and IndexWriter make them.
class StepFile {
 public:
  StepFile(uint64_t step, int mode, uint64_t mode_step, std::string worker)
      : step_(step), mode_(mode), mode_step_(mode_step), worker_(std::move(worker)) {
    index_.mutable_fields()->insert({"shape_payload", {}});
    (*index_.mutable_fields())["shape_payload"].mutable_list_value();
    (*index_.mutable_fields())["tensor_payload"].mutable_list_value();
    auto* meta = (*index_.mutable_fields())["meta"].mutable_struct_value()->mutable_fields();
    (*meta)["mode"].set_string_value(client::ModeText(mode));
    (*meta)["mode_step"].set_number_value(static_cast<double>(mode_step));
    (*meta)["event_file_name"].set_string_value(smdebug::EventFilePath(step, worker_));
  }

  void Add(const std::string& tag, v1::DType dtype, const std::vector<int64_t>& shape,
           const std::string& data, double wall) {
    tfevent::Event e;
    e.set_wall_time(wall);
    e.set_step(static_cast<int64_t>(step_));
    auto* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    auto* md = v->mutable_metadata();
    auto* p1 = md->add_plugin_data();
    p1->set_plugin_name(smdebug::kModeStepPlugin);
    p1->set_content(std::to_string(mode_step_));
    auto* p2 = md->add_plugin_data();
    p2->set_plugin_name(smdebug::kModePlugin);
    p2->set_content(std::to_string(mode_));
    auto* t = v->mutable_tensor();
    t->set_dtype(*smdebug::ToDataType(dtype));
    for (int64_t d : shape) {
      auto* dim = t->mutable_tensor_shape()->add_dim();
      dim->set_size(d);
      dim->set_name(absl::StrCat(tag, "_", d));
    }
    t->set_tensor_content(data);
    const size_t start = events_.size();
    tfrecord::AppendRecord(e.SerializeAsString(), tfrecord::PayloadCrc::kSmdebugPlaceholder,
                           &events_);
    auto* entry = (*index_.mutable_fields())["tensor_payload"].mutable_list_value()->add_values();
    auto* f = entry->mutable_struct_value()->mutable_fields();
    (*f)["tensorname"].set_string_value(tag);
    (*f)["start_idx"].set_number_value(static_cast<double>(start));
    (*f)["length"].set_number_value(static_cast<double>(events_.size() - start));
  }

  absl::Status Write(const fs::path& dir) const {
    TK_RETURN_IF_ERROR(WriteFile(dir / smdebug::EventFilePath(step_, worker_), events_));
    return WriteFile(dir / smdebug::IndexFilePath(step_, worker_), ToJson(index_));
  }

 private:
  uint64_t step_;
  int mode_;
  uint64_t mode_step_;
  std::string worker_;
  std::string events_;
  google::protobuf::Struct index_;
};

}  // namespace

int ExportSmdebug(const Args& args, const std::shared_ptr<Connection>& connection) {
  if (args.positional().size() != 2) return UsageError("export-smdebug needs TRIAL DIR");
  const std::string trial_name = args.positional()[0];
  const fs::path dir = args.positional()[1];
  std::error_code ec;
  if (fs::exists(dir / "events", ec) || fs::exists(dir / "index", ec)) {
    return Fail(absl::AlreadyExistsError(absl::StrCat(
        dir.string(),
        " already holds an smdebug trial (events/ or index/); choose an empty directory")));
  }
  if (absl::Status up = WaitForCollector(*connection); !up.ok()) return Fail(up);
  client::Trial trial(connection, trial_name);
  auto summary = trial.Summary();
  if (!summary.ok()) return Fail(summary.status());
  auto steps = trial.Steps();
  if (!steps.ok()) return Fail(steps.status());
  auto workers = trial.Workers();
  if (!workers.ok()) return Fail(workers.status());
  auto collections = trial.CollectionInfos();
  if (!collections.ok()) return Fail(collections.status());

  const double wall = Now();
  uint64_t values = 0, reductions = 0, files = 0;
  ProgressBar bar("exporting", steps->size(), "steps");
  uint64_t done = 0;
  for (uint64_t step : *steps) {
    auto mode = trial.ModeOf(step);
    if (!mode.ok()) return Fail(mode.status());
    auto mode_step = trial.ModeStep(step);
    if (!mode_step.ok()) return Fail(mode_step.status());
    std::map<std::string, StepFile> by_worker;
    auto names = trial.TensorNames(step);
    if (!names.ok()) return Fail(names.status());
    for (const auto& name : *names) {
      client::Tensor tensor = trial.tensor(name);
      auto ws = tensor.Workers(step);
      if (!ws.ok()) return Fail(ws.status());
      for (const auto& w : *ws) {
        auto it = by_worker.try_emplace(w, step, *mode, *mode_step, w).first;
        auto value = tensor.GetValue(step, client::kGlobal, w);
        if (value.ok()) {
          it->second.Add(name, static_cast<v1::DType>(value->dtype), value->shape, value->data,
                         wall);
          ++values;
        } else if (GetReason(value.status()) != Reason::kTensorUnavailableForStep) {
          return Fail(value.status());
        }
        auto saved = tensor.SavedReductions(step, client::kGlobal, w);
        if (!saved.ok()) return Fail(saved.status());
        for (const auto& [key, v] : *saved) {
          std::string bytes(reinterpret_cast<const char*>(&v), sizeof(v));
          it->second.Add(smdebug::ReductionTensorName(name, key.first, key.second), v1::FLOAT64,
                         {1}, bytes, wall);  // smdebug saves a reduction as float64 (1,)
          ++reductions;
        }
      }
    }
    for (const auto& [w, f] : by_worker) {
      absl::Status s = f.Write(dir);
      if (!s.ok()) return Fail(s);
      ++files;
    }
    bar.Update(++done);
  }
  bar.Done();

  // Every worker's collections file: each collection with its stored
  // configuration (that of the first worker that sent it; smdebug reads the
  // first worker's file) and the tensors its regexes do not cover.
  google::protobuf::Struct colls;
  auto* cf = (*colls.mutable_fields())["collections"].mutable_struct_value()->mutable_fields();
  for (const v1::CollectionInfo& info : *collections) {
    (*cf)[info.name()] = smdebug::CollectionJson(info.name(), info.configured(), info.config(),
                                                 smdebug::ListedTensorNames(info));
  }
  const uint32_t num_workers =
      std::max<uint32_t>(summary->num_workers(), static_cast<uint32_t>(workers->size()));
  (*(*colls.mutable_fields())["_meta"].mutable_struct_value()->mutable_fields())["num_workers"]
      .set_number_value(num_workers);
  for (const auto& w : *workers) {
    absl::Status s = WriteFile(dir / smdebug::CollectionsFilePath(w), ToJson(colls));
    if (!s.ok()) return Fail(s);
  }
  const bool ended = summary->ended();
  if (ended) {
    absl::Status s = WriteFile(dir / smdebug::kEndFile, "");
    if (!s.ok()) return Fail(s);
  }
  std::cout << "exported trial " << trial_name << " to " << dir.string() << ": " << steps->size()
            << " steps, " << workers->size() << " workers, " << values << " values, " << reductions
            << " saved reductions, " << collections->size() << " collections in " << files
            << " event files" << (ended ? "; training_job_end.ts written" : "; trial still running")
            << "\n";
  return 0;
}

}  // namespace cli
}  // namespace tensorkeep
