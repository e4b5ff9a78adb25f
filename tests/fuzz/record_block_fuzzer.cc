// Fuzzes what the collector reads back from a record block entry of the
// database (server/collector.cc Recover and the query paths): the input is the
// block's bytes, as LevelDB would hand them over from a damaged file.
//
// RecordBlock::Parse promises that, once it accepts a block, at() and Find()
// cannot read out of bounds. Checked here besides "no crash, no sanitizer
// report":
//  - every entry's name, meta and data are views into the input;
//  - names strictly increase, and Find(name) returns exactly at(i);
//  - Find of a name that is not there returns nothing;
//  - rebuilding the entries with RecordBlockBuilder gives a block that parses
//    to the same entries (the bytes may differ: Parse accepts over-long varints);
//  - DecodeRecordMeta (server/stored_record.h) on each entry: any result but a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "google/protobuf/stubs/logging.h"
#include "server/stored_record.h"
#include "storage/record_block.h"
#include "tests/fuzz/fuzz_check.h"

namespace tensorkeep {
namespace {

bool Inside(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

bool SameEntry(const RecordBlock::Entry& a, const RecordBlock::Entry& b) {
  return a.name == b.name && a.meta == b.meta && a.data == b.data;
}

void CheckBlock(std::string_view bytes) {
  auto block = RecordBlock::Parse(bytes);
  if (!block.ok()) return;
  TK_FUZZ_CHECK(block->size() > 0);
  RecordBlockBuilder builder;
  std::string_view previous;
  for (size_t i = 0; i < block->size(); ++i) {
    const RecordBlock::Entry e = block->at(i);
    TK_FUZZ_CHECK(Inside(e.name, bytes) && Inside(e.meta, bytes) && Inside(e.data, bytes));
    TK_FUZZ_CHECK(i == 0 || previous < e.name);
    previous = e.name;
    const auto found = block->Find(e.name);
    TK_FUZZ_CHECK(found.has_value() && SameEntry(*found, e));
    // A name just after this one (and before the next) is not in the block.
    TK_FUZZ_CHECK(!block->Find(std::string(e.name) + '\0').has_value() ||
                  (i + 1 < block->size() && block->at(i + 1).name == std::string(e.name) + '\0'));
    (void)DecodeRecordMeta(e, /*step=*/i);
    builder.Add(e.name, e.meta, e.data);
  }
  TK_FUZZ_CHECK(!block->Find("").has_value() || block->at(0).name.empty());

  const std::string rebuilt = builder.Finish();
  auto again = RecordBlock::Parse(rebuilt);
  TK_FUZZ_CHECK(again.ok());
  TK_FUZZ_CHECK(again->size() == block->size());
  for (size_t i = 0; i < block->size(); ++i) {
    TK_FUZZ_CHECK(SameEntry(again->at(i), block->at(i)));
  }
  TK_FUZZ_CHECK(rebuilt.size() <= bytes.size());
}

}  // namespace
}  // namespace tensorkeep

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // DecodeRecordMeta's invalid UTF-8 in a string field is an expected
  // rejection, not worth a log line per input.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // libFuzzer's buffer holds exactly `size` bytes: ASan catches a read past them.
  tensorkeep::CheckBlock(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
