// The value log that value_log_fuzzer reads, built the same way by the fuzzer
// and by the seed generator (make_corpus.cc), so that the seeds point at real
// values: two files written by two opens of the log (as two server runs would),
// holding values of a few sizes.
#ifndef TENSORKEEP_TESTS_FUZZ_VALUE_LOG_FIXTURE_H_
#define TENSORKEEP_TESTS_FUZZ_VALUE_LOG_FIXTURE_H_

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "leveldb/env.h"
#include "storage/stored.pb.h"
#include "storage/value_log.h"

namespace tensorkeep {

inline constexpr char kFixtureDir[] = "/vlog";

// Fills `env` (an empty MemEnv) and returns a ref to each value written.
inline std::vector<storage::ValueRef> WriteFixtureLog(leveldb::Env* env) {
  std::vector<storage::ValueRef> refs;
  const std::vector<std::vector<std::string>> runs = {
      {std::string(1, 'a'), std::string(1500, 'b'), std::string(64, '\x7f')},
      {std::string(4096, '\0'), std::string(3, 'c')},
  };
  for (const auto& run : runs) {
    auto log = ValueLog::Open(env, kFixtureDir, /*sync_directory=*/false, /*max_file_bytes=*/1 << 20);
    if (!log.ok()) std::abort();
    for (const std::string& value : run) {
      auto at = (*log)->Append(value);
      if (!at.ok()) std::abort();
      storage::ValueRef ref;
      ref.set_file(at->file);
      ref.set_offset(at->offset);
      ref.set_size(value.size());
      ref.set_crc32(ValueChecksum(value));
      refs.push_back(ref);
    }
    if (!(*log)->Sync().ok()) std::abort();
  }
  return refs;
}

}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_FUZZ_VALUE_LOG_FIXTURE_H_
