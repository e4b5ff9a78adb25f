// Fuzzes the LevelDB key schema (storage/keys.h).
//
// Decoding: the input, read as a key from a damaged database, through
// KeyReader in every order the code reads keys (server/collector.cc Recover:
// trial, worker and rule keys, block keys; the value keys' order of
// storage/keys.h). Whatever a reader accepts, rebuilding it with KeyBuilder
// gives back exactly the bytes it consumed.
//
// Encoding: the same input split (FuzzedDataProvider) into trial, worker and
// tensor names, steps and block ids; each key built from them decodes to them
// and nothing more, sorts by step like the steps do, and starts with the
// TrialPrefix of its own trial only.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "storage/keys.h"
#include "tests/fuzz/fuzz_check.h"

namespace tensorkeep {
namespace {

enum class Part { kStr, kU64 };

// The orders in which the code reads keys, after the family byte.
const std::vector<std::vector<Part>>& Layouts() {
  static const auto* layouts = new std::vector<std::vector<Part>>{
      {},                                                        // format
      {Part::kStr},                                              // trial
      {Part::kStr, Part::kStr},                                  // worker, rule
      {Part::kStr, Part::kU64, Part::kStr, Part::kU64},          // block
      {Part::kU64, Part::kStr, Part::kU64, Part::kStr, Part::kStr},  // value
  };
  return *layouts;
}

void CheckDecoding(std::string_view key) {
  for (const auto& layout : Layouts()) {
    KeyReader r(key);
    KeyFamily family;
    if (!r.Family(&family)) {
      TK_FUZZ_CHECK(key.empty());
      continue;
    }
    KeyBuilder rebuilt(family);
    bool ok = true;
    for (Part part : layout) {
      if (part == Part::kStr) {
        std::string_view s;
        ok = r.Str(&s);
        if (ok) {
          TK_FUZZ_CHECK(s.size() <= kMaxKeyComponent);
          TK_FUZZ_CHECK(s.empty() || (s.data() >= key.data() &&
                                      s.data() + s.size() <= key.data() + key.size()));
          rebuilt.Str(s);
        }
      } else {
        uint64_t v;
        ok = r.U64(&v);
        if (ok) rebuilt.U64(v);
      }
      if (!ok) break;
    }
    if (!ok) continue;
    // What was read is a prefix of the key, byte for byte.
    TK_FUZZ_CHECK(key.substr(0, rebuilt.key().size()) == rebuilt.key());
    TK_FUZZ_CHECK(r.AtEnd() == (rebuilt.key().size() == key.size()));
  }
}

struct Names {
  std::string trial, worker, name;
  uint64_t step, block_id;
};

Names Consume(FuzzedDataProvider& in) {
  Names n;
  n.trial = in.ConsumeRandomLengthString(64);
  n.worker = in.ConsumeRandomLengthString(64);
  n.name = in.ConsumeRandomLengthString(64);
  n.step = in.ConsumeIntegral<uint64_t>();
  n.block_id = in.ConsumeIntegral<uint64_t>();
  return n;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

void CheckRoundTrip(const Names& a, const Names& b) {
  {
    const std::string key = TrialKey(a.trial);  // KeyReader holds a view of it
    KeyReader r(key);
    KeyFamily f;
    std::string_view trial;
    TK_FUZZ_CHECK(r.Family(&f) && f == KeyFamily::kTrial && r.Str(&trial) && r.AtEnd());
    TK_FUZZ_CHECK(trial == a.trial);
  }
  for (const auto& [family, key] : {std::pair{KeyFamily::kWorker, WorkerKey(a.trial, a.worker)},
                                    std::pair{KeyFamily::kRule, RuleKey(a.trial, a.worker)}}) {
    KeyReader r(key);
    KeyFamily f;
    std::string_view trial, second;
    TK_FUZZ_CHECK(r.Family(&f) && f == family && r.Str(&trial) && r.Str(&second) && r.AtEnd());
    TK_FUZZ_CHECK(trial == a.trial && second == a.worker);
  }
  const std::string block = BlockKey(a.trial, a.step, a.worker, a.block_id);
  {
    KeyReader r(block);
    KeyFamily f;
    std::string_view trial, worker;
    uint64_t step, id;
    TK_FUZZ_CHECK(r.Family(&f) && f == KeyFamily::kBlock && r.Str(&trial) && r.U64(&step) &&
                  r.Str(&worker) && r.U64(&id) && r.AtEnd());
    TK_FUZZ_CHECK(trial == a.trial && step == a.step && worker == a.worker && id == a.block_id);
  }
  {
    const std::string key = ValueKey(a.trial, a.step, a.worker, a.block_id, a.name);
    KeyReader r(key);
    KeyFamily f;
    std::string_view trial, worker, name;
    uint64_t step, id;
    TK_FUZZ_CHECK(r.Family(&f) && f == KeyFamily::kValue && r.U64(&id) && r.Str(&trial) &&
                  r.U64(&step) && r.Str(&worker) && r.Str(&name) && r.AtEnd());
    TK_FUZZ_CHECK(trial == a.trial && step == a.step && worker == a.worker && id == a.block_id &&
                  name == a.name);
  }
  // A trial's prefix covers its own keys and no other trial's, whatever the names hold.
  const std::string other_block = BlockKey(b.trial, b.step, b.worker, b.block_id);
  TK_FUZZ_CHECK(StartsWith(block, TrialPrefix(KeyFamily::kBlock, a.trial)));
  TK_FUZZ_CHECK(StartsWith(other_block, TrialPrefix(KeyFamily::kBlock, a.trial)) ==
                (a.trial == b.trial));
  TK_FUZZ_CHECK(StartsWith(block, FamilyPrefix(KeyFamily::kBlock)));
  // Within a trial, blocks sort by step first (numerically), then worker.
  const std::string same_trial = BlockKey(a.trial, b.step, b.worker, b.block_id);
  if (a.step != b.step) TK_FUZZ_CHECK((block < same_trial) == (a.step < b.step));
}

}  // namespace
}  // namespace tensorkeep

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tensorkeep::CheckDecoding(std::string_view(reinterpret_cast<const char*>(data), size));
  FuzzedDataProvider in(data, size);
  const tensorkeep::Names a = tensorkeep::Consume(in);
  const tensorkeep::Names b = tensorkeep::Consume(in);
  tensorkeep::CheckRoundTrip(a, b);
  return 0;
}
