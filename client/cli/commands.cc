#include "client/cli/commands.h"

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "base/tokens.h"
#include "client/cli/args.h"
#include "client/cli/bar_chart.h"
#include "client/cli/cli_errors.h"
#include "client/cli/rebalance.h"
#include "client/cli/smdebug_export.h"
#include "client/cli/smdebug_import.h"
#include "client/cli/tensorboard_export.h"
#include "client/cluster.h"
#include "client/trial.h"
#include "client/writer.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "tensor/dtype.h"
#include "tensor/npy.h"

namespace tensorkeep {
namespace cli {
namespace {

constexpr char kUsage[] = R"(usage: tensorkeep [--server HOST:PORT ...] [--tls-ca FILE] [--token T] COMMAND [ARGS] [--json]

The server defaults to $TENSORKEEP_SERVERS, else $TENSORKEEP_SERVER, else
127.0.0.1:7077. A cluster's collectors are given as HOST:PORT,HOST:PORT,... or
several --server: each TRIAL is found on the collector that holds it
(docs/scaling-out.md). Steps are global steps unless --mode says otherwise
(then they are steps of that mode).

commands:
  trials                                   list trials (of every collector; one that
                                           cannot be reached is named, exit status 3)
  info TRIAL                               state, workers, steps, collections, rules
  steps TRIAL [--mode M] [--incomplete]    saved (complete) steps
  tensors TRIAL [--step N] [--mode M] [--regex R ... | --collection C]
  workers TRIAL                            each worker's state (ACTIVE, CLOSED, LOST),
                                           last saved and committed step, connection
  worker-lost TRIAL WORKER                 declare a worker lost: later steps complete
                                           without it (until it reconnects)
  collections TRIAL                        each collection: its tensors, and the writers'
                                           regexes, save and reduction configs
  put TRIAL NAME --step N --file X.npy [--mode M --mode-step K] [--worker W]
      [--collection C ...] [--num-workers N (default: the trial's)]
                                           store one tensor and commit the step
  value TRIAL NAME --step N [--mode M] [--worker W] (--out Y.npy | --json)
  reduce TRIAL NAME --step N --reduction R [--abs] [--mode M] [--worker W]
                                           R: min max mean std variance sum prod l1 l2
  histogram TRIAL NAME --step N [--bins B] [--range LO,HI] [--mode M] [--worker W]
  end TRIAL                                end the trial (no more steps)
  delete TRIAL [--no-wait]                 delete the trial and its data (admin token; asks
                                           nothing); waits until its space is reclaimed
                                           unless --no-wait, and prints what was deleted
  wait TRIAL STEP... [--mode M] [--timeout S]
                                           return when the steps are available
  watch TRIAL [--from N]                   print each newly complete step
  rules TRIAL [--watch]                    rule statuses
  rebalance [--dry-run]                    move each ended trial that is not on the
                                           collector owning it there (copy, verify,
                                           delete; admin token); --dry-run lists them
  health                                   exit 0 if the collector is SERVING (grpc health;
                                           with a cluster, every collector)
  export-tensorboard TRIAL DIR [--follow] [--reductions mean,std,...]
                                           TensorBoard event files, one run directory per
                                           worker: scalar tensors and the chosen reductions
                                           (abs_ prefix for |x|; default mean,std) as
                                           scalars, the others as histograms; --follow keeps
                                           writing as steps complete until the trial ends
                                           (or Ctrl-C)
  import-smdebug DIR TRIAL                 an smdebug trial directory into a new trial
  export-smdebug TRIAL DIR                 a trial as smdebug's layout (create_trial(DIR))
  token-new NAME ROLE [TRIAL_PREFIX...]    make a token (ROLE: read, write or admin) and
                                           print it once, with its line for the
                                           collector's --auth-tokens file

connection options (before or after the command):
)";

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

struct Context {
  std::shared_ptr<Cluster> cluster;
  // The collector of the command's TRIAL (the first collector for commands
  // without one).
  std::shared_ptr<Connection> connection;
  ClientSecurity security;
  bool json = false;
};

// Common flags of the query commands.
struct Where {
  int mode = client::kGlobal;
  std::string worker;
  std::optional<uint64_t> step;
};

absl::StatusOr<Where> ReadWhere(const Args& args) {
  Where w;
  if (auto m = args.Get("mode")) {
    TK_ASSIGN_OR_RETURN(w.mode, client::ParseMode(*m));
  }
  if (auto v = args.Get("worker")) w.worker = *v;
  TK_ASSIGN_OR_RETURN(w.step, args.GetUint("step"));
  return w;
}

template <typename T>
void PrintList(const std::vector<T>& items, bool json) {
  if (json) {
    google::protobuf::ListValue list;
    for (const auto& i : items) {
      if constexpr (std::is_same_v<T, std::string>) {
        list.add_values()->set_string_value(i);
      } else {
        list.add_values()->set_number_value(static_cast<double>(i));
      }
    }
    std::cout << ToJson(list) << "\n";
    return;
  }
  for (const auto& i : items) std::cout << i << "\n";
}

// Exit status of `trials` when some collectors could not be listed.
constexpr int kPartialListing = 3;

// trials: every collector's trials, merged. A collector that does not answer
// makes only its trials missing: it is named on stderr (and in the JSON's
// "unavailable"), and the exit status is kPartialListing.
int Trials(const Args&, Context& ctx) {
  const Cluster::Listing listing = ctx.cluster->ListTrials();
  if (listing.failures.size() == ctx.cluster->size() && ctx.cluster->size() == 1) {
    return Fail(listing.failures.front().second);
  }
  const bool cluster = ctx.cluster->size() > 1;
  if (ctx.json) {
    // {"trials": [TrialSummary + "collector"], "unavailable": [{collector, error}]}
    google::protobuf::Struct out;
    auto* trials = (*out.mutable_fields())["trials"].mutable_list_value();
    for (const auto& [address, t] : listing.trials) {
      google::protobuf::Struct item;
      (void)google::protobuf::util::JsonStringToMessage(ToJson(t), &item);
      (*item.mutable_fields())["collector"].set_string_value(address);
      *trials->add_values()->mutable_struct_value() = std::move(item);
    }
    auto* unavailable = (*out.mutable_fields())["unavailable"].mutable_list_value();
    for (const auto& [address, status] : listing.failures) {
      auto& f = *unavailable->add_values()->mutable_struct_value()->mutable_fields();
      f["collector"].set_string_value(address);
      f["error"].set_string_value(std::string(status.message()));
    }
    std::cout << ToJson(out) << "\n";
  } else {
    std::printf("%-32s %-8s %7s %9s %10s %8s%s\n", "TRIAL", "STATE", "WORKERS", "STEPS", "LAST",
                "TENSORS", cluster ? "  COLLECTOR" : "");
    for (const auto& [address, t] : listing.trials) {
      std::printf("%-32s %-8s %7u %9llu %10lld %8llu%s%s\n", t.name().c_str(),
                  t.ended() ? "ended" : "running", t.num_workers(),
                  static_cast<unsigned long long>(t.num_steps()),
                  static_cast<long long>(t.last_step()),
                  static_cast<unsigned long long>(t.num_tensors()),
                  cluster ? ("  " + address).c_str() : "",
                  t.stop_requested() ? "  (stop requested)" : "");
    }
  }
  for (const auto& [address, status] : listing.failures) {
    std::cerr << "tensorkeep: the trials of the collector at " << address
              << " are not listed: " << status.message() << "\n";
  }
  return listing.failures.empty() ? 0 : kPartialListing;
}

int Info(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("info needs TRIAL");
  client::Trial trial(ctx.connection, args.positional()[0]);
  auto summary = trial.Summary();
  if (!summary.ok()) return Fail(summary.status());
  auto collections = trial.CollectionInfos();
  if (!collections.ok()) return Fail(collections.status());
  auto rules = trial.RuleStatuses();
  if (!rules.ok()) return Fail(rules.status());
  if (ctx.json) {
    std::cout << ToJson(*summary) << "\n";
    return 0;
  }
  const auto& s = *summary;
  std::cout << "trial:            " << s.name() << (s.ended() ? " (ended)" : " (running)") << "\n";
  std::cout << "workers:          " << s.num_workers() << " expected:";
  for (const auto& w : s.worker_statuses()) {
    std::cout << " " << w.worker() << "(" << v1::WorkerState_Name(w.state());
    if (w.last_step() >= 0) std::cout << ", last step " << w.last_step();
    if (w.attempt() > 0) std::cout << ", attempt " << w.attempt();
    std::cout << ")";
  }
  std::cout << "\nsteps:            " << s.num_steps() << " saved, last " << s.last_step()
            << ", complete through " << s.complete_through() << "\nmodes:           ";
  for (int m : s.modes()) std::cout << " " << client::ModeText(m);
  std::cout << "\ntensors:          " << s.num_tensors() << "\ncollections:     ";
  for (const auto& c : *collections) {
    std::cout << " " << c.name() << "(" << c.tensor_names_size() << (c.configured() ? ", configured" : "")
              << ")";
  }
  std::cout << "\n";
  if (s.stop_requested()) std::cout << "stop requested:   " << s.stop_reason() << "\n";
  for (const auto& r : *rules) {
    std::cout << "rule " << r.rule() << ": " << v1::RuleStatus::State_Name(r.state());
    if (r.step() >= 0 && r.state() == v1::RuleStatus::ISSUES_FOUND) std::cout << " at step " << r.step();
    if (!r.message().empty()) std::cout << " — " << r.message();
    std::cout << "\n";
  }
  return 0;
}

int Steps(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("steps needs TRIAL");
  auto where = ReadWhere(args);
  if (!where.ok()) return UsageError(std::string(where.status().message()));
  client::Trial trial(ctx.connection, args.positional()[0]);
  auto steps = trial.Steps(where->mode, args.Has("incomplete"));
  if (!steps.ok()) return Fail(steps.status());
  PrintList(*steps, ctx.json);
  return 0;
}

int Tensors(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("tensors needs TRIAL");
  auto where = ReadWhere(args);
  if (!where.ok()) return UsageError(std::string(where.status().message()));
  if (args.Has("regex") && args.Has("collection")) {
    return UsageError("give either --regex or --collection, not both");
  }
  client::Trial trial(ctx.connection, args.positional()[0]);
  auto names = trial.TensorNames(where->step, where->mode, args.GetAll("regex"),
                                 args.Get("collection").value_or(""));
  if (!names.ok()) return Fail(names.status());
  PrintList(*names, ctx.json);
  return 0;
}

void PrintWorkerStatus(const v1::WorkerStatus& w) {
  std::printf("%-24s %-7s %10lld %10lld %7u  %-3s %s\n", w.worker().c_str(),
              v1::WorkerState_Name(w.state()).c_str(), static_cast<long long>(w.last_step()),
              static_cast<long long>(w.committed_through()), w.attempt(),
              w.connected() ? "yes" : "no", w.reason().c_str());
}

// "worker_1 restarted: attempt 1 at 2026-11-24T08:30:00Z (attempt 0 had
// committed through step 37)", a line a restart (docs/semantics.md).
void PrintRestarts(const v1::WorkerStatus& w) {
  for (const v1::WorkerRestart& r : w.restarts()) {
    const absl::Time at = absl::FromUnixNanos(static_cast<int64_t>(r.started_unix() * 1e9));
    std::printf("%s restarted: attempt %u at %s (the attempt before had committed %s)\n",
                w.worker().c_str(), r.attempt(),
                absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", at, absl::UTCTimeZone()).c_str(),
                r.previous_committed_through() < 0
                    ? "no step"
                    : absl::StrCat("through step ", r.previous_committed_through()).c_str());
  }
}

int Workers(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("workers needs TRIAL");
  auto workers = client::Trial(ctx.connection, args.positional()[0]).WorkerStatuses();
  if (!workers.ok()) return Fail(workers.status());
  if (ctx.json) {
    v1::WorkerList list;
    for (const auto& w : *workers) {
      list.add_workers(w.worker());
      *list.add_statuses() = w;
    }
    std::cout << ToJson(list) << "\n";
    return 0;
  }
  std::printf("%-24s %-7s %10s %10s %7s  %-3s %s\n", "WORKER", "STATE", "LAST", "COMMITTED",
              "ATTEMPT", "CON", "REASON");
  for (const auto& w : *workers) PrintWorkerStatus(w);
  for (const auto& w : *workers) PrintRestarts(w);
  return 0;
}

int WorkerLost(const Args& args, Context& ctx) {
  if (args.positional().size() != 2) return UsageError("worker-lost needs TRIAL WORKER");
  auto status =
      client::Trial(ctx.connection, args.positional()[0]).DeclareWorkerLost(args.positional()[1]);
  if (!status.ok()) return Fail(status.status());
  if (ctx.json) {
    std::cout << ToJson(*status) << "\n";
    return 0;
  }
  std::cout << "worker " << status->worker() << " of trial " << args.positional()[0] << " is "
            << v1::WorkerState_Name(status->state())
            << ": later steps complete without it until it reconnects\n";
  return 0;
}

std::string SaveConfigText(const v1::SaveConfigMode& s) {
  std::string out = absl::StrCat(client::ModeText(s.mode()), ": every ", s.save_interval(),
                                 " from ", s.start_step());
  if (s.has_end_step()) absl::StrAppend(&out, " to ", s.end_step());
  if (s.save_steps_size() > 0) absl::StrAppend(&out, ", and steps ", absl::StrJoin(s.save_steps(), ","));
  return out;
}

std::string ReductionText(const v1::ReductionConfig& r) {
  std::vector<std::string> parts(r.reductions().begin(), r.reductions().end());
  for (const auto& n : r.norms()) parts.push_back(n + "_norm");
  for (const auto& n : r.abs_reductions()) parts.push_back("abs_" + n);
  for (const auto& n : r.abs_norms()) parts.push_back("abs_" + n + "_norm");
  return absl::StrCat(parts.empty() ? "none" : absl::StrJoin(parts, ","),
                      r.save_raw_tensor() ? " (and the raw tensor)" : " (raw tensor not saved)");
}

int Collections(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("collections needs TRIAL");
  auto c = client::Trial(ctx.connection, args.positional()[0]).CollectionInfos();
  if (!c.ok()) return Fail(c.status());
  if (ctx.json) {
    v1::CollectionsResponse out;
    for (const auto& info : *c) *out.add_collections() = info;
    std::cout << ToJson(out) << "\n";
    return 0;
  }
  for (const auto& info : *c) {
    std::cout << info.name() << ": " << info.tensor_names_size() << " tensors";
    for (const auto& t : info.tensor_names()) std::cout << " " << t;
    std::cout << "\n";
    if (!info.configured()) continue;
    const v1::CollectionConfig& cfg = info.config();
    std::cout << "  configured by:  " << absl::StrJoin(info.configured_by(), ", ") << "\n";
    if (cfg.include_regex_size() > 0) {
      std::cout << "  include_regex:  " << absl::StrJoin(cfg.include_regex(), "  ") << "\n";
    }
    for (const auto& s : cfg.save_configs()) std::cout << "  save_config:    " << SaveConfigText(s) << "\n";
    if (cfg.has_reduction_config()) {
      std::cout << "  reductions:     " << ReductionText(cfg.reduction_config()) << "\n";
    }
  }
  return 0;
}

int Put(const Args& args, Context& ctx) {
  if (args.positional().size() != 2) return UsageError("put needs TRIAL NAME");
  auto step = args.GetUint("step");
  if (!step.ok()) return UsageError(std::string(step.status().message()));
  if (!step->has_value()) return UsageError("put needs --step N");
  auto file = args.Get("file");
  if (!file.has_value()) return UsageError("put needs --file X.npy");
  int mode = client::kTrain;
  if (auto m = args.Get("mode")) {
    auto parsed = client::ParseMode(*m);
    if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
    mode = *parsed;
  }
  auto mode_step = args.GetUint("mode-step");
  if (!mode_step.ok()) return UsageError(std::string(mode_step.status().message()));
  auto num_workers = args.GetUint("num-workers");
  if (!num_workers.ok()) return UsageError(std::string(num_workers.status().message()));
  auto array = ReadNpyFile(*file);
  if (!array.ok()) return Fail(array.status());

  client::WriterOptions opts;
  opts.server = ctx.connection->address();
  opts.security = ctx.security;
  opts.trial = args.positional()[0];
  opts.worker = args.Get("worker").value_or("worker_0");
  opts.num_workers = static_cast<uint32_t>(num_workers->value_or(1));
  if (!num_workers->has_value()) {
    // The trial's writers must agree on num_workers: join an existing trial
    // with its count.
    auto summary = client::Trial(ctx.connection, opts.trial).Summary();
    if (summary.ok() && summary->num_workers() > 0) opts.num_workers = summary->num_workers();
  }
  auto writer = client::Writer::Open(opts);
  if (!writer.ok()) return Fail(writer.status());
  v1::TensorRecord r;
  r.set_name(args.positional()[1]);
  r.set_step(**step);
  r.set_mode(static_cast<v1::Mode>(mode));
  r.set_mode_step(mode_step->value_or(**step));
  r.set_dtype(static_cast<v1::DType>(array->dtype));
  for (int64_t d : array->shape) r.add_shape(d);
  r.set_has_value(true);
  *r.mutable_data() = std::move(array->data);
  for (const auto& c : args.GetAll("collection")) r.add_collections(c);
  absl::Status s = (*writer)->Write(std::move(r));
  if (s.ok()) s = (*writer)->EndStep(**step);
  if (s.ok()) s = (*writer)->Close(/*end_of_training=*/false);
  if (!s.ok()) return Fail(s);
  if (!ctx.json) {
    std::cout << "stored " << args.positional()[1] << " at step " << **step << " of trial "
              << opts.trial << " (worker " << opts.worker << ")\n";
  }
  return 0;
}

// Element i of a value as a double.
double Element(DType dtype, const std::string& data, size_t i) {
  double v;
  ConvertToFloat64(dtype, data.data() + i * DTypeSize(dtype), 1, &v);
  return v;
}

int Value(const Args& args, Context& ctx) {
  if (args.positional().size() != 2) return UsageError("value needs TRIAL NAME");
  auto where = ReadWhere(args);
  if (!where.ok()) return UsageError(std::string(where.status().message()));
  if (!where->step.has_value()) return UsageError("value needs --step N");
  auto out = args.Get("out");
  if (!out.has_value() && !ctx.json) return UsageError("value needs --out Y.npy or --json");
  client::Tensor tensor(ctx.connection, args.positional()[0], args.positional()[1]);
  auto value = tensor.GetValue(*where->step, where->mode, where->worker);
  if (!value.ok()) return Fail(value.status());
  const DType dtype = static_cast<DType>(value->dtype);
  if (out.has_value()) {
    NpyArray array{dtype, value->shape, std::move(value->data)};
    absl::Status s = WriteNpyFile(*out, array);
    if (!s.ok()) return Fail(s);
    std::cerr << "wrote " << *out << " (" << DTypeName(dtype)
              << (dtype == DType::kBFloat16 ? " widened to float32: numpy has no bfloat16" : "")
              << ", step " << value->step << ", worker " << value->worker << ")\n";
    value->data = std::move(array.data);
    if (!ctx.json) return 0;
  }
  google::protobuf::Struct json;
  auto& f = *json.mutable_fields();
  f["tensor"].set_string_value(args.positional()[1]);
  f["step"].set_number_value(static_cast<double>(value->step));
  f["mode"].set_string_value(client::ModeText(value->mode));
  f["mode_step"].set_number_value(static_cast<double>(value->mode_step));
  f["worker"].set_string_value(value->worker);
  f["dtype"].set_string_value(std::string(DTypeName(dtype)));
  auto* shape = f["shape"].mutable_list_value();
  for (int64_t d : value->shape) shape->add_values()->set_number_value(static_cast<double>(d));
  auto* values = f["values"].mutable_list_value();
  const size_t n = value->data.size() / DTypeSize(dtype);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::kBool) {
      values->add_values()->set_bool_value(value->data[i] != 0);
    } else {
      values->add_values()->set_number_value(Element(dtype, value->data, i));
    }
  }
  std::cout << ToJson(json) << "\n";
  return 0;
}

int Reduce(const Args& args, Context& ctx) {
  if (args.positional().size() != 2) return UsageError("reduce needs TRIAL NAME");
  auto where = ReadWhere(args);
  if (!where.ok()) return UsageError(std::string(where.status().message()));
  if (!where->step.has_value()) return UsageError("reduce needs --step N");
  auto reduction = args.Get("reduction");
  if (!reduction.has_value()) return UsageError("reduce needs --reduction R");
  client::Tensor tensor(ctx.connection, args.positional()[0], args.positional()[1]);
  auto v = tensor.ReductionValue(*where->step, *reduction, where->mode, where->worker,
                                 args.Has("abs"));
  if (!v.ok()) return Fail(v.status());
  if (ctx.json) {
    google::protobuf::Struct json;
    (*json.mutable_fields())["reduction"].set_string_value(*reduction);
    (*json.mutable_fields())["abs"].set_bool_value(args.Has("abs"));
    (*json.mutable_fields())["value"].set_number_value(*v);
    std::cout << ToJson(json) << "\n";
  } else {
    std::printf("%.17g\n", *v);
  }
  return 0;
}

int HistogramCmd(const Args& args, Context& ctx) {
  if (args.positional().size() != 2) return UsageError("histogram needs TRIAL NAME");
  auto where = ReadWhere(args);
  if (!where.ok()) return UsageError(std::string(where.status().message()));
  if (!where->step.has_value()) return UsageError("histogram needs --step N");
  auto bins = args.GetUint("bins");
  if (!bins.ok()) return UsageError(std::string(bins.status().message()));
  std::optional<std::pair<double, double>> range;
  if (auto r = args.Get("range")) {
    std::vector<std::string> parts = absl::StrSplit(*r, ',');
    char* e1 = nullptr;
    char* e2 = nullptr;
    if (parts.size() != 2) return UsageError("--range must be LO,HI");
    const double lo = std::strtod(parts[0].c_str(), &e1);
    const double hi = std::strtod(parts[1].c_str(), &e2);
    if (*e1 != '\0' || *e2 != '\0' || parts[0].empty() || parts[1].empty()) {
      return UsageError("--range must be LO,HI (two numbers)");
    }
    range = std::make_pair(lo, hi);
  }
  client::Tensor tensor(ctx.connection, args.positional()[0], args.positional()[1]);
  auto h = tensor.GetHistogram(*where->step, static_cast<int>(bins->value_or(20)), range,
                               where->mode, where->worker);
  if (!h.ok()) return Fail(h.status());
  if (ctx.json) {
    v1::HistogramResponse resp;
    for (double e : h->edges) resp.add_edges(e);
    for (uint64_t c : h->counts) resp.add_counts(c);
    resp.set_nan_count(h->nan_count);
    resp.set_outside_count(h->outside_count);
    std::cout << ToJson(resp) << "\n";
    return 0;
  }
  std::cout << RenderBarChart(h->edges, h->counts);
  if (h->nan_count > 0) std::cout << "NaN: " << h->nan_count << "\n";
  if (h->outside_count > 0) std::cout << "outside the range: " << h->outside_count << "\n";
  return 0;
}

int End(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("end needs TRIAL");
  auto was = client::Trial(ctx.connection, args.positional()[0]).End();
  if (!was.ok()) return Fail(was.status());
  if (!ctx.json) {
    std::cout << "trial " << args.positional()[0]
              << (*was ? " ended" : " had already ended") << "\n";
  }
  return 0;
}

// "1.5 GiB", "12.0 MiB", "300 B".
std::string Bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

int Delete(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("delete needs TRIAL");
  auto deleted = client::Trial(ctx.connection, args.positional()[0]).Delete(!args.Has("no-wait"));
  if (!deleted.ok()) return Fail(deleted.status());
  if (ctx.json) {
    std::cout << ToJson(*deleted) << "\n";
    return 0;
  }
  std::cout << "deleted trial " << deleted->trial() << " (" << deleted->steps() << " steps, "
            << deleted->workers() << " workers, " << deleted->tensor_names()
            << " tensor names), by " << deleted->deleted_by() << "\n";
  if (deleted->reclaimed()) {
    std::cout << "reclaimed: " << Bytes(deleted->index_bytes()) << " of index entries, "
              << Bytes(deleted->value_bytes()) << " of large values; value files removed: "
              << Bytes(deleted->value_files_freed_bytes()) << "\n";
  } else {
    std::cout << "its space is reclaimed in the background\n";
  }
  return 0;
}

int Wait(const Args& args, Context& ctx) {
  if (args.positional().size() < 2) return UsageError("wait needs TRIAL STEP...");
  auto where = ReadWhere(args);
  if (!where.ok()) return UsageError(std::string(where.status().message()));
  auto timeout = args.GetDouble("timeout");
  if (!timeout.ok()) return UsageError(std::string(timeout.status().message()));
  std::vector<uint64_t> steps;
  for (size_t i = 1; i < args.positional().size(); ++i) {
    char* end = nullptr;
    const std::string& p = args.positional()[i];
    const unsigned long long n = std::strtoull(p.c_str(), &end, 10);
    if (p.empty() || p[0] == '-' || *end != '\0') return UsageError("steps must be integers >= 0");
    steps.push_back(n);
  }
  client::Trial trial(ctx.connection, args.positional()[0]);
  absl::Status s = trial.WaitForSteps(steps, where->mode, timeout->value_or(0));
  if (!s.ok()) return Fail(s);
  if (!ctx.json) std::cout << "available\n";
  return 0;
}

int Watch(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("watch needs TRIAL");
  auto from = args.GetUint("from");
  if (!from.ok()) return UsageError(std::string(from.status().message()));
  grpc::ClientContext cc;
  v1::WatchStepsRequest req;
  req.set_trial(args.positional()[0]);
  req.set_from_step(from->value_or(0));
  auto reader = ctx.connection->stub()->WatchSteps(&cc, req);
  v1::StepEvent ev;
  while (reader->Read(&ev)) {
    if (ctx.json) {
      std::cout << ToJson(ev) << std::endl;
    } else if (ev.end_of_trial()) {
      std::cout << "end of trial" << std::endl;
    } else {
      std::cout << "step " << ev.step() << " complete (" << client::ModeText(ev.mode())
                << " step " << ev.mode_step() << ")" << std::endl;
    }
  }
  absl::Status s = FromGrpc(reader->Finish(), &cc, *ctx.connection);
  return s.ok() ? 0 : Fail(s);
}

void PrintRule(const v1::RuleStatus& r, bool json) {
  if (json) {
    std::cout << ToJson(r) << std::endl;
    return;
  }
  std::cout << r.rule() << ": " << v1::RuleStatus::State_Name(r.state());
  if (r.state() == v1::RuleStatus::ISSUES_FOUND) std::cout << " at step " << r.step();
  if (r.last_evaluated_step() >= 0) std::cout << " (evaluated through step " << r.last_evaluated_step() << ")";
  if (!r.message().empty()) std::cout << " — " << r.message();
  if (!r.action().empty()) std::cout << " [action: " << r.action() << "]";
  std::cout << std::endl;
}

int Rules(const Args& args, Context& ctx) {
  if (args.positional().size() != 1) return UsageError("rules needs TRIAL");
  if (!args.Has("watch")) {
    auto rules = client::Trial(ctx.connection, args.positional()[0]).RuleStatuses();
    if (!rules.ok()) return Fail(rules.status());
    if (rules->empty() && !ctx.json) std::cout << "no rule has reported on this trial\n";
    for (const auto& r : *rules) PrintRule(r, ctx.json);
    return 0;
  }
  grpc::ClientContext cc;
  v1::WatchRuleStatusesRequest req;
  req.set_trial(args.positional()[0]);
  auto reader = ctx.connection->stub()->WatchRuleStatuses(&cc, req);
  v1::RuleStatus r;
  while (reader->Read(&r)) PrintRule(r, ctx.json);
  absl::Status s = FromGrpc(reader->Finish(), &cc, *ctx.connection);
  return s.ok() ? 0 : Fail(s);
}

struct Command {
  std::function<int(const Args&, Context&)> run;
  std::set<std::string> value_flags;
  std::set<std::string> bool_flags;
};

}  // namespace

// health: asks the standard grpc.health.v1.Health service (no token needed)
// and exits 0 when the collector is SERVING: a probe for systemd or
// Kubernetes that works with TLS (kubelet's own gRPC probe speaks plaintext).
int HealthOf(const Connection& connection, bool prefix);

int Health(const Args&, Context& ctx) {
  int rc = 0;
  for (const auto& c : ctx.cluster->connections()) {
    rc = std::max(rc, HealthOf(*c, ctx.cluster->size() > 1));
  }
  return rc;
}

int HealthOf(const Connection& connection, bool prefix) {
  if (prefix) std::cout << connection.address() << ": " << std::flush;
  grpc::GenericStub stub(connection.channel());
  grpc::ClientContext cc;
  cc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("");  // HealthCheckRequest{service: ""} serializes to nothing
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&cc, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  absl::Status s = FromGrpc(done.get_future().get(), &cc, connection);
  if (!s.ok()) {
    if (prefix) std::cout << "UNREACHABLE\n";
    return Fail(s);
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const auto& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  // HealthCheckResponse: field 1 (varint) is the status, 1 = SERVING.
  const bool serving = bytes == std::string("\x08\x01", 2);
  std::cout << (serving ? "SERVING" : "NOT_SERVING") << "\n";
  return serving ? 0 : 1;
}

// token-new NAME ROLE [PREFIX...]: a new token, printed once, and its line
// for the collector's --auth-tokens file (which holds only the hash).
int TokenNew(const std::vector<std::string>& args) {
  if (args.size() < 2) return UsageError("token-new needs NAME ROLE [TRIAL_PREFIX...]");
  auto plain = [](const std::string& s) {
    if (s.empty() || s[0] == '#') return false;
    for (char c : s) {
      if (c <= ' ' || c == 0x7f) return false;
    }
    return true;
  };
  for (const auto& a : args) {
    if (!plain(a)) {
      return UsageError("token-new: '" + a +
                        "' must be non-empty, without spaces or control characters, and not "
                        "start with #");
    }
  }
  if (!ParseRole(args[1]).has_value()) {
    return UsageError("token-new: unknown role '" + args[1] + "' (read, write or admin)");
  }
  const std::string token = NewToken();
  if (token.empty()) return Fail(absl::InternalError("OpenSSL's random generator failed"));
  // The file's order: hash ROLE NAME [PREFIX...].
  std::string line = TokenHashText(Sha256(token)) + " " + args[1] + " " + args[0];
  for (size_t i = 2; i < args.size(); ++i) line += " " + args[i];
  std::cout << "token (shown once; give it to " << args[0] << " as --token or TENSORKEEP_TOKEN):\n"
            << "  " << token << "\n"
            << "line for the collector's --auth-tokens file (then send it SIGHUP):\n"
            << line << "\n";
  return 0;
}

int RunCli(const std::vector<std::string>& argv) {
  const std::map<std::string, Command> commands = {
      {"trials", {Trials, {}, {}}},
      {"info", {Info, {}, {}}},
      {"steps", {Steps, {"mode"}, {"incomplete"}}},
      {"tensors", {Tensors, {"step", "mode", "regex", "collection"}, {}}},
      {"workers", {Workers, {}, {}}},
      {"worker-lost", {WorkerLost, {}, {}}},
      {"collections", {Collections, {}, {}}},
      {"put",
       {Put, {"step", "mode", "mode-step", "worker", "collection", "file", "num-workers"}, {}}},
      {"value", {Value, {"step", "mode", "worker", "out"}, {}}},
      {"reduce", {Reduce, {"step", "mode", "worker", "reduction"}, {"abs"}}},
      {"histogram", {HistogramCmd, {"step", "mode", "worker", "bins", "range"}, {}}},
      {"end", {End, {}, {}}},
      {"delete", {Delete, {}, {"no-wait"}}},
      {"wait", {Wait, {"mode", "timeout"}, {}}},
      {"watch", {Watch, {"from"}, {}}},
      {"rules", {Rules, {}, {"watch"}}},
      {"health", {Health, {}, {}}},
      {"export-tensorboard",
       {[](const Args& a, Context& c) { return ExportTensorboard(a, c.connection); },
        {"reductions"},
        {"follow"}}},
      {"import-smdebug",
       {[](const Args& a, Context& c) { return ImportSmdebug(a, c.connection, c.security); },
        {},
        {}}},
      {"export-smdebug",
       {[](const Args& a, Context& c) { return ExportSmdebug(a, c.connection); }, {}, {}}},
      {"rebalance",
       {[](const Args& a, Context& c) { return Rebalance(a, *c.cluster, c.security); },
        {},
        {"dry-run"}}},
  };
  // Connection flags, before or after the command.
  std::string server;
  ClientSecurity security;
  const std::map<std::string, std::string*> global = {{"server", &server},
                                                      {"tls-ca", &security.tls_ca},
                                                      {"tls-cert", &security.tls_cert},
                                                      {"tls-key", &security.tls_key},
                                                      {"token", &security.token}};
  auto take_global = [&](size_t& j) -> bool {
    const std::string& a = argv[j];
    if (a.rfind("--", 0) != 0) return false;
    const size_t eq = a.find('=');
    auto g = global.find(a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
    if (g == global.end()) return false;
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (j + 1 < argv.size()) {
      value = argv[++j];
    } else {
      return false;
    }
    // --server is repeatable (a cluster's collectors); the rest take the last.
    if (g->first == "server" && !g->second->empty()) {
      *g->second += "," + value;
    } else {
      *g->second = value;
    }
    return true;
  };
  size_t i = 0;
  for (; i < argv.size(); ++i) {
    if (argv[i] == "--help" || argv[i] == "-h" || argv[i] == "help") {
      std::cout << kUsage << ClientSecurityUsage();
      return 0;
    }
    if (!take_global(i)) break;
  }
  if (i >= argv.size()) {
    std::cerr << kUsage << ClientSecurityUsage();
    return 2;
  }
  std::vector<std::string> rest;
  for (size_t j = i + 1; j < argv.size(); ++j) {
    if (!take_global(j)) rest.push_back(argv[j]);
  }
  if (argv[i] == "token-new") return TokenNew(rest);
  auto it = commands.find(argv[i]);
  if (it == commands.end()) return UsageError("unknown command '" + argv[i] + "'");
  std::set<std::string> bool_flags = it->second.bool_flags;
  bool_flags.insert("json");
  auto args = Args::Parse(rest, it->second.value_flags, bool_flags);
  if (!args.ok()) return UsageError(std::string(args.status().message()));
  auto cluster = Cluster::Open(server, security);
  if (!cluster.ok()) return Fail(cluster.status());
  std::shared_ptr<Connection> connection = (*cluster)->connections().front();
  // The command's TRIAL (import-smdebug DIR TRIAL: the second), on the
  // collector that holds it; `put` and `import-smdebug` may create it.
  const bool creates = argv[i] == "put" || argv[i] == "import-smdebug";
  const size_t trial_arg = argv[i] == "import-smdebug" ? 1 : 0;
  if (args->positional().size() > trial_arg && argv[i] != "trials" && argv[i] != "health" &&
      argv[i] != "rebalance") {
    auto located = (*cluster)->Locate(args->positional()[trial_arg],
                                      creates ? Cluster::Purpose::kWrite : Cluster::Purpose::kRead);
    if (!located.ok()) return Fail(located.status());
    connection = *located;
  }
  Context ctx{*cluster, connection, security, args->Has("json")};
  return it->second.run(*args, ctx);
}

}  // namespace cli
}  // namespace tensorkeep
