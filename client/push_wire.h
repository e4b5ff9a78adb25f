// PushWire: the Writer's PushRequest messages in their wire form, built from
// slices that share the tensor bytes instead of copying them.
//
// Protobuf would copy every value into the request (moving a std::string in)
// and again into gRPC's buffer when serialising it. Here a message's small
// parts (tags, lengths, a record without its data) are encoded into one
// buffer and each value is referenced as the grpc::Slice it already is (the
// copy tensorkeep-agent made out of the training process's ring), so the only
// pass over the data after that copy is the kernel's. The bytes parse to the
// same PushRequest as protobuf's own serialisation (a record's data field
// comes last rather than in field order, which parsers accept);
// tests/client/push_wire_test.cc checks it.
//
// The seq (field 1) is added when a message is sent (WithSeq): a message
// resent after a reconnect gets a new one without being encoded again.
//
// Thread safety: free functions on values; a Slice's bytes are never written
// once shared.
#ifndef TENSORKEEP_CLIENT_PUSH_WIRE_H_
#define TENSORKEEP_CLIENT_PUSH_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/tensorkeep.pb.h"

namespace tensorkeep {
namespace client {

// A message without its seq, as slices in order.
using WireBody = std::vector<grpc::Slice>;

// Values up to this size are copied into the message's small parts (a slice
// each would cost more than the copy).
inline constexpr size_t kInlineValueBytes = 512;

// A Slice that owns `bytes` (moved in: its buffer is not copied).
grpc::Slice SliceOf(std::string bytes);
// A new Slice holding a copy of `n` bytes at `p` (the one copy out of shared
// memory that a value then lives in).
grpc::Slice CopyToSlice(const void* p, size_t n);

// A RecordBatch message: records[i] (whose data is empty) with values[i] as
// its data.
WireBody EncodeRecords(const v1::RecordBatch& records, const std::vector<grpc::Slice>& values);
// A Chunk message carrying `data`.
WireBody EncodeChunk(const grpc::Slice& data);
// Any other message (no tensor bytes): `request` serialised (its seq unset).
WireBody EncodeControl(const v1::PushRequest& request);
// The message to send: seq, then the body.
grpc::ByteBuffer WithSeq(uint64_t seq, const WireBody& body);

}  // namespace client
}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_PUSH_WIRE_H_
