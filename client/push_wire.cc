#include "client/push_wire.h"

#include <cstring>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "grpc/slice.h"

namespace tensorkeep {
namespace client {
namespace {

using google::protobuf::io::CodedOutputStream;

// Tags (field number << 3 | wire type) of the fields written here.
constexpr char kSeqTag = (1 << 3) | 0;          // PushRequest.seq, varint
constexpr char kRecordsTag = (3 << 3) | 2;      // PushRequest.records
constexpr char kChunkTag = (4 << 3) | 2;        // PushRequest.chunk
constexpr char kBatchRecordTag = (1 << 3) | 2;  // RecordBatch.records
constexpr char kDataTag = (7 << 3) | 2;         // TensorRecord.data
constexpr char kChunkDataTag = (1 << 3) | 2;    // Chunk.data

size_t VarintSize(uint64_t v) { return CodedOutputStream::VarintSize64(v); }

void PutVarint(std::string* out, uint64_t v) {
  uint8_t buf[10];
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(v, buf);
  out->append(reinterpret_cast<const char*>(buf), end - buf);
}

void PutLengthDelimited(std::string* out, char tag, uint64_t length) {
  out->push_back(tag);
  PutVarint(out, length);
}

void DeleteString(void* p) { delete static_cast<std::string*>(p); }

}  // namespace

grpc::Slice SliceOf(std::string bytes) {
  if (bytes.empty()) return grpc::Slice();
  auto* owned = new std::string(std::move(bytes));
  return grpc::Slice(owned->data(), owned->size(), &DeleteString, owned);
}

grpc::Slice CopyToSlice(const void* p, size_t n) {
  grpc_slice s = grpc_slice_malloc(n);
  if (n > 0) std::memcpy(GRPC_SLICE_START_PTR(s), p, n);
  return grpc::Slice(s, grpc::Slice::STEAL_REF);
}

WireBody EncodeRecords(const v1::RecordBatch& records, const std::vector<grpc::Slice>& values) {
  const int n = records.records_size();
  std::vector<std::string> metas(n);
  std::vector<size_t> lengths(n);
  size_t batch = 0;
  for (int i = 0; i < n; ++i) {
    records.records(i).SerializeToString(&metas[i]);
    const size_t value = i < static_cast<int>(values.size()) ? values[i].size() : 0;
    lengths[i] = metas[i].size() + (value > 0 ? 1 + VarintSize(value) + value : 0);
    batch += 1 + VarintSize(lengths[i]) + lengths[i];
  }
  WireBody out;
  std::string small;
  PutLengthDelimited(&small, kRecordsTag, batch);
  for (int i = 0; i < n; ++i) {
    PutLengthDelimited(&small, kBatchRecordTag, lengths[i]);
    small += metas[i];
    const size_t value = i < static_cast<int>(values.size()) ? values[i].size() : 0;
    if (value == 0) continue;
    PutLengthDelimited(&small, kDataTag, value);
    if (value <= kInlineValueBytes) {
      small.append(reinterpret_cast<const char*>(values[i].begin()), value);
      continue;
    }
    out.push_back(SliceOf(std::move(small)));
    small.clear();
    out.push_back(values[i]);
  }
  if (!small.empty()) out.push_back(SliceOf(std::move(small)));
  return out;
}

WireBody EncodeChunk(const grpc::Slice& data) {
  std::string head;
  const size_t n = data.size();
  PutLengthDelimited(&head, kChunkTag, n > 0 ? 1 + VarintSize(n) + n : 0);
  WireBody out;
  if (n > 0) {
    PutLengthDelimited(&head, kChunkDataTag, n);
    out.push_back(SliceOf(std::move(head)));
    out.push_back(data);
  } else {
    out.push_back(SliceOf(std::move(head)));
  }
  return out;
}

WireBody EncodeControl(const v1::PushRequest& request) {
  WireBody out;
  std::string bytes = request.SerializeAsString();
  if (!bytes.empty()) out.push_back(SliceOf(std::move(bytes)));
  return out;
}

grpc::ByteBuffer WithSeq(uint64_t seq, const WireBody& body) {
  std::vector<grpc::Slice> slices;
  slices.reserve(body.size() + 1);
  std::string head;
  if (seq != 0) {
    head.push_back(kSeqTag);
    PutVarint(&head, seq);
  }
  slices.push_back(grpc::Slice(head));
  for (const grpc::Slice& s : body) slices.push_back(s);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace client
}  // namespace tensorkeep
