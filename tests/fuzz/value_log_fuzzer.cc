// Fuzzes how a large value is read back (storage/leveldb_tensor_store.cc
// ReadValue): the input is the index entry, a serialized storage::ValueRef, as
// a damaged database could hold it; the value log is a fixed one in memory
// (value_log_fixture.h, on leveldb's MemEnv).
//
// Checked besides "no crash, no sanitizer report, no huge allocation": a read
// that succeeds returns exactly `size` bytes whose checksum is the ref's, and
// a ref that points past its file's end is DataLoss, never a short value.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "leveldb/env.h"
#include "leveldb/helpers/memenv.h"
#include "storage/stored.pb.h"
#include "storage/value_log.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/value_log_fixture.h"

namespace tensorkeep {
namespace {

struct Fixture {
  Fixture() : env(leveldb::NewMemEnv(leveldb::Env::Default())) {
    WriteFixtureLog(env.get());
    auto opened = ValueLog::Open(env.get(), kFixtureDir, /*sync_directory=*/false, 1 << 20);
    if (!opened.ok()) std::abort();
    log = std::move(*opened);
  }
  std::unique_ptr<leveldb::Env> env;
  std::unique_ptr<ValueLog> log;
};

}  // namespace
}  // namespace tensorkeep

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorkeep;  // NOLINT: a fuzz entry point, not a header
  static Fixture* fixture = new Fixture();
  storage::ValueRef ref;
  if (!ref.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto value = fixture->log->Read(ref);
  uint64_t file_size = 0;
  const bool exists = fixture->env->GetFileSize(fixture->log->FileName(ref.file()), &file_size).ok();
  if (value.ok()) {
    TK_FUZZ_CHECK(exists);
    TK_FUZZ_CHECK(value->size() == ref.size());
    TK_FUZZ_CHECK(ref.offset() <= file_size && ref.size() <= file_size - ref.offset());
    TK_FUZZ_CHECK(ValueChecksum(*value) == ref.crc32());
  } else {
    TK_FUZZ_CHECK(value.status().code() == absl::StatusCode::kDataLoss);
  }
  return 0;
}
