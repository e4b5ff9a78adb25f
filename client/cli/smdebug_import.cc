#include "client/cli/smdebug_import.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "client/cli/cli_errors.h"
#include "client/cli/collector_wait.h"
#include "client/cli/progress_bar.h"
#include "client/cli/smdebug_collections.h"
#include "client/cli/smdebug_layout.h"
#include "client/trial.h"
#include "client/writer.h"
#include "tensor/dtype.h"
#include "tfrecord/record.h"

namespace tensorkeep {
namespace cli {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> CollectionsOf(const std::string& tensor,
                                       const smdebug::CollectionsFile& file) {
  std::vector<std::string> out;
  for (const auto& c : file.collections) {
    if (c.Contains(tensor)) out.push_back(c.config.name());
  }
  return out;
}

// The values of a TensorProto as little-endian bytes of `dtype`.
absl::StatusOr<std::string> TensorBytes(const tfevent::TensorProto& t, v1::DType dtype) {
  if (!t.tensor_content().empty()) return t.tensor_content();
  std::string out;
  auto put = [&out](const auto& values, auto as) {
    for (auto v : values) {
      decltype(as) x = static_cast<decltype(as)>(v);
      out.append(reinterpret_cast<const char*>(&x), sizeof(x));
    }
  };
  switch (dtype) {
    case v1::FLOAT32:
      put(t.float_val(), float{});
      break;
    case v1::FLOAT64:
      put(t.double_val(), double{});
      break;
    case v1::INT32:
      put(t.int_val(), int32_t{});
      break;
    case v1::INT16:
      put(t.int_val(), int16_t{});
      break;
    case v1::INT8:
      put(t.int_val(), int8_t{});
      break;
    case v1::UINT8:
      put(t.int_val(), uint8_t{});
      break;
    case v1::INT64:
      put(t.int64_val(), int64_t{});
      break;
    case v1::BOOL:
      put(t.bool_val(), uint8_t{});
      break;
    case v1::FLOAT16:
    case v1::BFLOAT16:
      put(t.half_val(), uint16_t{});
      break;
    default:
      break;
  }
  return out;
}

struct Summary {
  uint64_t files = 0, values = 0, reductions = 0, skipped = 0, truncated_files = 0;
  std::set<uint64_t> steps;
  std::set<std::string> tensors, collections, skipped_names;
};

// Every record of one worker: step -> name -> record.
using WorkerRecords = std::map<uint64_t, std::map<std::string, v1::TensorRecord>>;

absl::Status ReadEventFile(const fs::path& path, const smdebug::StepFile& where, bool warn,
                           WorkerRecords* records, Summary* summary) {
  TK_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  auto scan = tfrecord::ScanRecords(bytes, /*accept_placeholder=*/true);
  if (!scan.ok())
    return absl::DataLossError(absl::StrCat(path.string(), ": ", scan.status().message()));
  if (scan->truncated) {
    ++summary->truncated_files;
    if (warn)
      std::cerr << "tensorkeep: warning: " << path.string() << " ends inside a record at byte "
                << scan->truncated_at << " (cut by a crash?): its " << scan->records.size()
                << " whole records are imported\n";
  }
  for (const auto& rec : scan->records) {
    tfevent::Event event;
    if (!event.ParseFromArray(rec.data.data(), static_cast<int>(rec.data.size()))) {
      return absl::DataLossError(
          absl::StrCat(path.string(), ": the record at byte ", rec.offset, " is not an Event"));
    }
    if (!event.has_summary()) continue;
    for (const auto& v : event.summary().value()) {
      if (!v.has_tensor()) continue;
      int mode = client::kGlobal;
      uint64_t mode_step = where.step;
      for (const auto& p : v.metadata().plugin_data()) {
        const bool ok = p.plugin_name() == smdebug::kModeStepPlugin
                            ? absl::SimpleAtoi(p.content(), &mode_step)
                        : p.plugin_name() == smdebug::kModePlugin
                            ? absl::SimpleAtoi(p.content(), &mode) && mode >= 1 && mode <= 4
                            : true;
        if (!ok) {
          return absl::DataLossError(absl::StrCat(path.string(), ": tensor ", v.tag(), " has ",
                                                  p.plugin_name(), " '", p.content(),
                                                  "', not a mode (1-4) or a step"));
        }
      }
      const auto dtype = smdebug::FromDataType(v.tensor().dtype());
      if (!dtype.has_value()) {
        ++summary->skipped;
        summary->skipped_names.insert(
            absl::StrCat(v.tag(), " (", tfevent::DataType_Name(v.tensor().dtype()), ")"));
        continue;
      }
      TK_ASSIGN_OR_RETURN(std::string data, TensorBytes(v.tensor(), *dtype));
      auto reduction = smdebug::ParseReductionTensorName(v.tag());
      const std::string& name = reduction.has_value() ? reduction->tensor : v.tag();
      v1::TensorRecord& r = (*records)[where.step][name];
      r.set_name(name);
      r.set_step(where.step);
      r.set_mode(static_cast<v1::Mode>(mode));
      r.set_mode_step(mode_step);
      if (reduction.has_value()) {
        if (data.size() < DTypeSize(static_cast<DType>(*dtype))) {
          return absl::DataLossError(
              absl::StrCat(path.string(), ": reduction ", v.tag(), " is empty"));
        }
        double value;
        ConvertToFloat64(static_cast<DType>(*dtype), data.data(), 1, &value);
        auto* red = r.add_reductions();
        red->set_name(reduction->reduction);
        red->set_abs(reduction->abs);
        red->set_value(value);
        ++summary->reductions;
      } else {
        r.set_dtype(*dtype);
        r.clear_shape();
        for (const auto& d : v.tensor().tensor_shape().dim()) r.add_shape(d.size());
        if (absl::Status size = CheckValueSize(static_cast<DType>(*dtype), r.shape(), data.size());
            !size.ok()) {
          return absl::DataLossError(
              absl::StrCat(path.string(), ": tensor ", v.tag(), ": ", size.message()));
        }
        r.set_has_value(true);
        *r.mutable_data() = std::move(data);
        ++summary->values;
      }
      summary->tensors.insert(name);
    }
  }
  summary->steps.insert(where.step);
  return absl::OkStatus();
}

// Stores each worker's configured collections; returns the names of the
// collections stored (none, with a warning, when the collector refused).
std::set<std::string> PutCollections(const client::Trial& trial,
                                     const std::map<std::string, smdebug::CollectionsFile>& files) {
  std::set<std::string> names;
  for (const auto& [worker, file] : files) {
    std::vector<v1::CollectionConfig> configs;
    for (const auto& c : file.collections) {
      if (c.configured) configs.push_back(c.config);
    }
    if (configs.empty()) continue;
    auto put = trial.PutCollections(worker, configs);
    if (!put.ok()) {
      std::cerr << "tensorkeep: warning: the collector did not store the collections of " << worker
                << ": " << put.status().message() << "; the tensors are imported without them\n";
      continue;
    }
    for (const auto& c : configs) names.insert(c.name());
  }
  return names;
}

}  // namespace

int ImportSmdebug(const Args& args, const std::shared_ptr<Connection>& connection,
                  const ClientSecurity& security) {
  if (args.positional().size() != 2) return UsageError("import-smdebug needs DIR TRIAL");
  const fs::path dir = args.positional()[0];
  const std::string trial_name = args.positional()[1];
  std::error_code ec;
  if (!fs::is_directory(dir / "events", ec)) {
    return Fail(absl::NotFoundError(
        absl::StrCat(dir.string(), " is not an smdebug trial directory (no events/ in it)")));
  }
  if (absl::Status up = WaitForCollector(*connection); !up.ok()) return Fail(up);
  // Importing into an existing trial would mix two runs: refuse at once.
  if (client::Trial(connection, trial_name).Summary().ok()) {
    return Fail(absl::AlreadyExistsError(
        absl::StrCat("trial ", trial_name, " already exists on ", connection->address(),
                     "; import into a new trial name (or delete that trial first)")));
  }

  // The event files, by worker.
  std::map<std::string, std::vector<std::pair<smdebug::StepFile, fs::path>>> files;
  size_t total = 0;
  for (const auto& step_dir : fs::directory_iterator(dir / "events", ec)) {
    if (!step_dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(step_dir.path(), ec)) {
      auto parsed = smdebug::ParseEventFileName(f.path().filename().string());
      if (!parsed.has_value()) continue;
      files[parsed->worker].push_back({*parsed, f.path()});
      ++total;
    }
  }
  if (total == 0) {
    return Fail(absl::NotFoundError(absl::StrCat(dir.string(), "/events holds no event files")));
  }
  // Every worker's collections file (smdebug writes one a worker): its
  // configuration is stored (PutCollections) as that worker's, and tags the
  // worker's tensors (a worker without a file: the first file's).
  std::map<std::string, smdebug::CollectionsFile> collections;
  uint32_t num_workers = static_cast<uint32_t>(files.size());
  size_t python_only = 0, not_stored = 0;
  for (const auto& f : fs::directory_iterator(dir / "collections" / "000000000", ec)) {
    const std::string worker = smdebug::WorkerOfCollectionsFile(f.path().filename().string());
    if (worker.empty()) continue;
    auto text = ReadFile(f.path());
    if (!text.ok()) return Fail(text.status());
    auto c = smdebug::ParseCollectionsFile(*text, f.path().string());
    if (!c.ok()) return Fail(c.status());
    num_workers = std::max(num_workers, c->num_workers);
    for (const auto& coll : c->collections) {
      for (const auto& p : coll.problems) {
        std::cerr << "tensorkeep: warning: " << f.path().string() << ": collection "
                  << coll.config.name() << ": " << p << "\n";
      }
      python_only += coll.python_only_regexes;
      if (!coll.configured) ++not_stored;
    }
    collections[worker] = std::move(*c);
  }
  if (collections.empty()) {
    std::cerr << "tensorkeep: warning: " << dir.string()
              << "/collections has no worker's collections file: tensors get no collections\n";
  }
  const bool ended = fs::exists(dir / smdebug::kEndFile, ec);

  Summary summary;
  for (auto& [worker, list] : files) {
    std::sort(list.begin(), list.end(),
              [](const auto& a, const auto& b) { return a.first.step < b.first.step; });
  }
  // Every file is checked first, so that a damaged directory fails before
  // anything is written; then each is read again and sent, one file in memory
  // at a time.
  {
    ProgressBar check("checking", total, "event files");
    Summary scratch_summary;
    uint64_t checked = 0;
    for (const auto& [worker, list] : files) {
      for (const auto& [where, path] : list) {
        WorkerRecords scratch;
        absl::Status s = ReadEventFile(path, where, /*warn=*/true, &scratch, &scratch_summary);
        if (!s.ok()) return Fail(s);
        check.Update(++checked);
      }
    }
  }
  ProgressBar bar("importing", total, "event files");
  bool collections_put = false;
  std::set<std::string> configured;
  uint64_t done = 0;
  for (const auto& [worker, list] : files) {
    const smdebug::CollectionsFile* colls = nullptr;
    if (auto it = collections.find(worker); it != collections.end()) {
      colls = &it->second;
    } else if (!collections.empty()) {
      colls = &collections.begin()->second;
    }
    client::WriterOptions opts;
    opts.server = connection->address();
    opts.security = security;
    opts.trial = trial_name;
    opts.worker = worker;
    opts.num_workers = num_workers;
    auto writer = client::Writer::Open(opts);
    if (!writer.ok()) return Fail(writer.status());
    if (!collections_put) {
      // Once the trial exists, and before it ends (an ended trial's
      // collections cannot change). A refusal leaves the data to import.
      collections_put = true;
      configured = PutCollections(client::Trial(connection, trial_name), collections);
    }
    for (const auto& [where, path] : list) {
      WorkerRecords records;
      absl::Status s = ReadEventFile(path, where, /*warn=*/false, &records, &summary);
      if (!s.ok()) return Fail(s);
      ++summary.files;
      for (auto& [step, by_name] : records) {
        for (auto& [name, record] : by_name) {
          if (colls != nullptr) {
            for (auto& c : CollectionsOf(name, *colls)) {
              summary.collections.insert(c);
              record.add_collections(std::move(c));
            }
          }
          s = (*writer)->Write(std::move(record));
          if (!s.ok()) return Fail(s);
        }
        s = (*writer)->EndStep(step);
        if (!s.ok()) return Fail(s);
      }
      bar.Update(++done);
    }
    absl::Status s = (*writer)->Close(ended);
    if (!s.ok()) return Fail(s);
  }
  bar.Done();

  std::set<std::string> all_collections = summary.collections;
  all_collections.insert(configured.begin(), configured.end());
  std::cout << "imported " << dir.string() << " into trial " << trial_name << ": "
            << summary.steps.size() << " steps";
  if (!summary.steps.empty()) {
    std::cout << " (" << *summary.steps.begin() << ".." << *summary.steps.rbegin() << ")";
  }
  std::cout << ", " << files.size() << " workers (of " << num_workers << "), "
            << summary.tensors.size() << " tensors, " << summary.values << " values, "
            << summary.reductions << " saved reductions, " << all_collections.size()
            << " collections (" << configured.size() << " configured), from " << summary.files
            << " event files; trial " << (ended ? "ended" : "left running (no training_job_end.ts)")
            << "\n";
  if (python_only > 0) {
    std::cout << "  " << python_only
              << " include_regex use lookaround or backreferences: stored as written, matched by "
                 "the Python client only\n";
  }
  if (not_stored > 0) {
    std::cout << "  " << not_stored
              << " collections' configurations could not be read and were not stored (see "
                 "warnings)\n";
  }
  if (summary.truncated_files > 0) {
    std::cout << "  " << summary.truncated_files
              << " event files were cut mid-record (see warnings)\n";
  }
  if (summary.skipped > 0) {
    std::cout << "  skipped " << summary.skipped << " values of dtypes tensorkeep does not store: "
              << absl::StrJoin(summary.skipped_names, ", ") << "\n";
  }
  return 0;
}

}  // namespace cli
}  // namespace tensorkeep
