// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/):
// a few small valid inputs made with the project's own encoders, so that the
// fuzzers start from real layouts instead of finding them byte by byte.
//
//   make_corpus <dir>     writes <dir>/{record_block,keys,npy,value_log,push}/seed_*
//
// The seeds are checked in; run this again (scripts/fuzz.sh --seeds) only when
// a format changes. Inputs the fuzzers once crashed on (regression_*) are
// added by hand and never rewritten here.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "leveldb/env.h"
#include "leveldb/helpers/memenv.h"
#include "proto/tensorkeep.pb.h"
#include "server/stored_record.h"
#include "storage/keys.h"
#include "storage/record_block.h"
#include "tensor/npy.h"
#include "tests/fuzz/push_stream.h"
#include "tests/fuzz/value_log_fixture.h"

namespace tensorkeep {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
}

v1::TensorRecord Record(const std::string& name, v1::DType dtype, std::vector<int64_t> shape,
                        std::string data) {
  v1::TensorRecord r;
  r.set_name(name);
  r.set_step(7);
  r.set_mode(v1::TRAIN);
  r.set_mode_step(3);
  r.set_dtype(dtype);
  for (int64_t d : shape) r.add_shape(d);
  r.set_value_size(data.size());
  r.set_has_value(true);
  r.set_data(std::move(data));
  r.add_collections("losses");
  return r;
}

void RecordBlocks(const fs::path& dir) {
  std::vector<v1::TensorRecord> records = {
      Record("loss", v1::FLOAT32, {}, std::string(4, '\x01')),
      Record("model.fc1.weight", v1::FLOAT16, {2, 3}, std::string(12, '\x02')),
      Record("model.fc2.bias", v1::INT64, {2}, std::string(16, '\x03')),
  };
  {
    RecordBlockBuilder b;
    v1::TensorRecord& r = records[0];
    b.Add(r.name(), EncodeRecordMeta(r), r.data());
    Write(dir, "seed_one_entry", b.Finish());
  }
  {
    RecordBlockBuilder b;
    for (auto& r : records) b.Add(r.name(), EncodeRecordMeta(r), r.data());
    Write(dir, "seed_three_entries", b.Finish());
  }
  {
    // A large value's entry: metadata only, the bytes are elsewhere.
    RecordBlockBuilder b;
    v1::TensorRecord r = Record("big", v1::FLOAT64, {1000}, "");
    r.set_value_size(8000);
    b.Add(r.name(), EncodeRecordMeta(r), "");
    b.Add("c", "", "x");
    Write(dir, "seed_out_of_line", b.Finish());
  }
}

void Keys(const fs::path& dir) {
  Write(dir, "seed_format", FormatKey());
  Write(dir, "seed_trial", TrialKey("mnist-run-1"));
  Write(dir, "seed_worker", WorkerKey("mnist-run-1", "worker_0"));
  Write(dir, "seed_block", BlockKey("mnist-run-1", 1234, "worker_0", 99));
  Write(dir, "seed_value", ValueKey("t", 5, "w", 77, "model.conv1.weight"));
  Write(dir, "seed_rule", RuleKey("t", "loss_not_decreasing"));
}

void Npy(const fs::path& dir) {
  Write(dir, "seed_f4_2x3", EncodeNpy(NpyArray{DType::kFloat32, {2, 3}, std::string(24, '\x11')}));
  Write(dir, "seed_i8_scalar", EncodeNpy(NpyArray{DType::kInt64, {}, std::string(8, '\x22')}));
  Write(dir, "seed_b1_empty", EncodeNpy(NpyArray{DType::kBool, {0, 5}, ""}));
  Write(dir, "seed_u1_3", EncodeNpy(NpyArray{DType::kUInt8, {3}, "abc"}));
  // What numpy.save writes for other layouts, which EncodeNpy never does.
  std::string fortran_big_endian = "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 2), }";
  // Padded with spaces and a newline so that the data starts at a multiple of 64.
  fortran_big_endian.append(63 - (10 + fortran_big_endian.size()) % 64, ' ');
  fortran_big_endian += '\n';
  std::string file("\x93NUMPY\x01\x00", 8);
  file.push_back(static_cast<char>(fortran_big_endian.size()));
  file.push_back('\0');
  Write(dir, "seed_fortran_big_endian", file + fortran_big_endian + std::string("\0\1\0\2\0\3\0\4", 8));
  std::string v3("\x93NUMPY\x03\x00", 8);
  const std::string header = "{\"descr\":\"<f8\",\"fortran_order\":False,\"shape\":(1L,)}\n";
  v3.push_back(static_cast<char>(header.size()));
  v3.append(3, '\0');
  Write(dir, "seed_v3_long_suffix", v3 + header + std::string(8, '\x40'));
}

void ValueLogRefs(const fs::path& dir) {
  std::unique_ptr<leveldb::Env> env(leveldb::NewMemEnv(leveldb::Env::Default()));
  const std::vector<storage::ValueRef> refs = WriteFixtureLog(env.get());
  for (size_t i = 0; i < refs.size(); ++i) {
    Write(dir, "seed_value_" + std::to_string(i), refs[i].SerializeAsString());
  }
  storage::ValueRef bad_crc = refs[1];
  bad_crc.set_crc32(bad_crc.crc32() ^ 1);
  Write(dir, "seed_bad_crc", bad_crc.SerializeAsString());
  storage::ValueRef past_end = refs.back();
  past_end.set_size(past_end.size() + 1);
  Write(dir, "seed_past_end", past_end.SerializeAsString());
  storage::ValueRef no_file = refs[0];
  no_file.set_file(42);
  Write(dir, "seed_no_file", no_file.SerializeAsString());
}

// Push streams (push_stream.h): what a well-behaved writer sends.
class StreamBuilder {
 public:
  v1::PushRequest& Next() {
    messages_.emplace_back();
    messages_.back().set_seq(messages_.size());
    return messages_.back();
  }
  std::string Finish() const {
    std::string stream;
    for (const auto& m : messages_) AppendPushMessage(&stream, m.SerializeAsString());
    return stream;
  }

 private:
  std::vector<v1::PushRequest> messages_;
};

void OpenStream(StreamBuilder& s, const std::string& worker) {
  v1::Open* open = s.Next().mutable_open();
  open->set_trial("mnist");
  open->set_worker(worker);
  open->set_num_workers(1);
}

void Push(const fs::path& dir) {
  {
    StreamBuilder s;
    OpenStream(s, "worker_0");
    for (uint64_t step : {0, 1}) {
      v1::RecordBatch* batch = s.Next().mutable_records();
      for (auto r : {Record("loss", v1::FLOAT32, {}, std::string(4, '\x01')),
                     Record("fc.weight", v1::FLOAT16, {2, 3}, std::string(12, '\x02'))}) {
        r.set_step(step);
        r.set_mode_step(step);
        v1::Reduction* max = r.add_reductions();
        max->set_name("max");
        max->set_value(1.5);
        *batch->add_records() = r;
      }
      s.Next().mutable_end_step()->set_step(step);
    }
    s.Next().mutable_flush();
    s.Next().mutable_close()->set_end_of_training(true);
    Write(dir, "seed_two_steps", s.Finish());
  }
  {
    // A large value sent in two parts: the record with half its bytes, then a Chunk.
    StreamBuilder s;
    OpenStream(s, "worker_1");
    v1::TensorRecord r = Record("conv.weight", v1::INT16, {1000}, std::string(1000, '\x03'));
    r.set_step(4);
    r.set_value_size(2000);
    *s.Next().mutable_records()->add_records() = r;
    s.Next().mutable_chunk()->set_data(std::string(1000, '\x04'));
    s.Next().mutable_end_step()->set_step(4);
    s.Next().mutable_close();
    Write(dir, "seed_chunked_value", s.Finish());
  }
  {
    // Only reductions (save_raw_tensor=False), and a scalar in another mode.
    StreamBuilder s;
    OpenStream(s, "worker_0");
    v1::RecordBatch* batch = s.Next().mutable_records();
    v1::TensorRecord r = Record("grad", v1::FLOAT32, {10}, "");
    r.set_has_value(false);
    r.set_value_size(0);
    r.add_reductions()->set_name("l2");
    *batch->add_records() = r;
    v1::TensorRecord e = Record("accuracy", v1::FLOAT64, {}, std::string(8, '\x05'));
    e.set_mode(v1::EVAL);
    e.set_step(8);  // a step is of one mode
    *batch->add_records() = e;
    s.Next().mutable_flush();
    Write(dir, "seed_reductions_only", s.Finish());
  }
}

}  // namespace
}  // namespace tensorkeep

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  tensorkeep::RecordBlocks(root / "record_block");
  tensorkeep::Keys(root / "keys");
  tensorkeep::Npy(root / "npy");
  tensorkeep::ValueLogRefs(root / "value_log");
  tensorkeep::Push(root / "push");
  return 0;
}
