#include "storage/record_block.h"

#include <cassert>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"

namespace tensorkeep {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

void PutVarint32(std::string* out, uint32_t v) {
  uint8_t buf[5];
  uint8_t* end = CodedOutputStream::WriteVarint32ToArray(v, buf);
  out->append(reinterpret_cast<const char*>(buf), end - buf);
}

void PutLengthPrefixed(std::string* out, std::string_view s) {
  PutVarint32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

uint32_t LoadFixed32(const char* p) {
  uint8_t b[4];
  std::memcpy(b, p, 4);
  return static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
         (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

void PutFixed32(std::string* out, uint32_t v) {
  const char b[4] = {static_cast<char>(v & 0xFF), static_cast<char>((v >> 8) & 0xFF),
                     static_cast<char>((v >> 16) & 0xFF), static_cast<char>((v >> 24) & 0xFF)};
  out->append(b, 4);
}

// Reads one length-prefixed string from in[*pos, end); false when it does not fit.
bool GetLengthPrefixed(std::string_view in, size_t end, size_t* pos, std::string_view* out) {
  if (*pos >= end) return false;
  CodedInputStream s(reinterpret_cast<const uint8_t*>(in.data() + *pos),
                     static_cast<int>(end - *pos));
  uint32_t n = 0;
  if (!s.ReadVarint32(&n)) return false;
  const size_t start = *pos + static_cast<size_t>(s.CurrentPosition());
  if (n > end - start) return false;
  *out = in.substr(start, n);
  *pos = start + n;
  return true;
}

}  // namespace

void RecordBlockBuilder::Add(std::string_view name, std::string_view meta, std::string_view data) {
  offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  PutLengthPrefixed(&bytes_, name);
  PutLengthPrefixed(&bytes_, meta);
  PutLengthPrefixed(&bytes_, data);
}

std::string RecordBlockBuilder::Finish() {
  std::string out = std::move(bytes_);
  out.reserve(out.size() + 4 * offsets_.size() + 4);
  for (uint32_t o : offsets_) PutFixed32(&out, o);
  PutFixed32(&out, static_cast<uint32_t>(offsets_.size()));
  bytes_.clear();
  offsets_.clear();
  return out;
}

absl::StatusOr<RecordBlock> RecordBlock::Parse(std::string_view bytes) {
  const auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("corrupt record block (", bytes.size(), " bytes): ", why));
  };
  if (bytes.size() < 4) return corrupt("shorter than its trailer");
  const uint64_t count = LoadFixed32(bytes.data() + bytes.size() - 4);
  if (count == 0) return corrupt("no entries");
  if (count > (bytes.size() - 4) / 4) return corrupt("entry count exceeds the block");
  RecordBlock block(bytes.substr(0, bytes.size() - 4), count);
  const size_t entries_end = block.bytes_.size() - 4 * count;
  size_t expected = 0;
  std::string_view previous;
  for (size_t i = 0; i < count; ++i) {
    if (block.offset(i) != expected) return corrupt("entries are not contiguous");
    std::string_view name, meta, data;
    if (!GetLengthPrefixed(bytes, entries_end, &expected, &name) ||
        !GetLengthPrefixed(bytes, entries_end, &expected, &meta) ||
        !GetLengthPrefixed(bytes, entries_end, &expected, &data)) {
      return corrupt(absl::StrCat("entry ", i, " overruns the block"));
    }
    if (i > 0 && !(previous < name)) return corrupt("names out of order");
    previous = name;
  }
  if (expected != entries_end) return corrupt("bytes after the last entry");
  return block;
}

uint32_t RecordBlock::offset(size_t i) const {
  return LoadFixed32(bytes_.data() + bytes_.size() - 4 * (count_ - i));
}

RecordBlock::Entry RecordBlock::at(size_t i) const {
  assert(i < count_);
  const size_t end = bytes_.size() - 4 * count_;
  size_t pos = offset(i);
  Entry e;
  // Parse() checked every entry: these cannot fail.
  GetLengthPrefixed(bytes_, end, &pos, &e.name);
  GetLengthPrefixed(bytes_, end, &pos, &e.meta);
  GetLengthPrefixed(bytes_, end, &pos, &e.data);
  return e;
}

std::string_view RecordBlock::name_at(size_t i) const {
  size_t pos = offset(i);
  std::string_view name;
  GetLengthPrefixed(bytes_, bytes_.size() - 4 * count_, &pos, &name);
  return name;
}

std::optional<RecordBlock::Entry> RecordBlock::Find(std::string_view name) const {
  size_t lo = 0, hi = count_;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    const std::string_view n = name_at(mid);
    if (n == name) return at(mid);
    if (n < name) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return std::nullopt;
}

}  // namespace tensorkeep
