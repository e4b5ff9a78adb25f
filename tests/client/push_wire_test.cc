// The Writer's wire form of PushRequest messages (client/push_wire.h): what
// it sends parses to the very PushRequest protobuf would have serialised
// (values of every size, empty values, records without a value, chunks,
// controls, seqs of every varint length), and large values are referenced,
// not copied.
#include "client/push_wire.h"

#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace tensorkeep {
namespace client {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::string Bytes(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 31);
  return s;
}

void ExpectParsesTo(const grpc::ByteBuffer& sent, const v1::PushRequest& expected) {
  v1::PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(sent)));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, expected))
      << "parsed:\n" << parsed.DebugString().substr(0, 2000) << "\nexpected:\n"
      << expected.DebugString().substr(0, 2000);
}

class PushWireTest : public ::testing::Test {
  grpc::internal::GrpcLibraryInitializer init_;  // grpc::Slice needs gRPC's core
 protected:
  void SetUp() override { grpc_init(); }
  void TearDown() override { grpc_shutdown(); }
};

TEST_F(PushWireTest, RecordsParseAsProtobufWouldHaveSerialisedThem) {
  // Values around the inline threshold and around varint length boundaries.
  const std::vector<size_t> sizes = {0, 1, 127, 128, kInlineValueBytes, kInlineValueBytes + 1,
                                     16383, 16384, 300000};
  v1::RecordBatch metas;
  std::vector<grpc::Slice> values;
  v1::PushRequest expected;
  for (size_t i = 0; i < sizes.size(); ++i) {
    v1::TensorRecord r;
    r.set_name("layer" + std::to_string(i) + std::string(i * 20, 'x'));
    r.set_step(1000 + i);
    r.set_mode(static_cast<v1::Mode>(1));
    r.set_dtype(static_cast<v1::DType>(1));
    r.add_shape(static_cast<int64_t>(sizes[i]));
    r.set_value_size(sizes[i]);
    r.set_has_value(sizes[i] > 0 || i == 0);
    const std::string value = Bytes(sizes[i], static_cast<char>(i));
    *metas.add_records() = r;
    values.push_back(SliceOf(value));
    r.set_data(value);
    *expected.mutable_records()->add_records() = r;
  }
  // A record saved without a value (reductions only), with no slice at all.
  v1::TensorRecord bare;
  bare.set_name("bare");
  bare.set_step(7);
  bare.set_mode(static_cast<v1::Mode>(2));
  *metas.add_records() = bare;
  *expected.mutable_records()->add_records() = bare;

  const WireBody body = EncodeRecords(metas, values);
  for (uint64_t seq : {uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{1} << 40}) {
    expected.set_seq(seq);
    ExpectParsesTo(WithSeq(seq, body), expected);
  }
  // The large value is sent from its own slice, not a copy.
  const grpc::Slice& large = values[sizes.size() - 1];
  bool shared = false;
  for (const auto& s : body) shared = shared || s.begin() == large.begin();
  EXPECT_TRUE(shared);
}

TEST_F(PushWireTest, AnEmptyBatch) {
  v1::PushRequest expected;
  expected.set_seq(3);
  expected.mutable_records();
  ExpectParsesTo(WithSeq(3, EncodeRecords(v1::RecordBatch(), {})), expected);
}

TEST_F(PushWireTest, ChunksAreSlicesOfTheValue) {
  const std::string value = Bytes(1 << 20, 5);
  const grpc::Slice whole = SliceOf(value);
  const grpc::Slice part = whole.sub(1000, 1000 + 200000);
  v1::PushRequest expected;
  expected.set_seq(9);
  expected.mutable_chunk()->set_data(value.substr(1000, 200000));
  const WireBody body = EncodeChunk(part);
  ExpectParsesTo(WithSeq(9, body), expected);
  EXPECT_EQ(body.back().begin(), whole.begin() + 1000);

  v1::PushRequest empty;
  empty.set_seq(10);
  empty.mutable_chunk();
  ExpectParsesTo(WithSeq(10, EncodeChunk(grpc::Slice())), empty);
}

TEST_F(PushWireTest, Controls) {
  v1::PushRequest end;
  end.mutable_end_step()->set_step(123456789);
  v1::PushRequest flush;
  flush.mutable_flush();
  v1::PushRequest close;
  close.mutable_close()->set_end_of_training(true);
  v1::PushRequest open;
  open.mutable_open()->set_trial("t");
  open.mutable_open()->set_worker("w");
  for (v1::PushRequest m : {end, flush, close, open}) {
    const WireBody body = EncodeControl(m);
    m.set_seq(77);
    ExpectParsesTo(WithSeq(77, body), m);
  }
}

TEST_F(PushWireTest, SliceOfMovesTheStringsBuffer) {
  std::string big = Bytes(100000, 1);
  const char* buffer = big.data();
  const grpc::Slice s = SliceOf(std::move(big));
  EXPECT_EQ(reinterpret_cast<const char*>(s.begin()), buffer);
  EXPECT_EQ(s.size(), 100000u);
  const std::string copy = Bytes(5000, 2);
  const grpc::Slice c = CopyToSlice(copy.data(), copy.size());
  EXPECT_NE(reinterpret_cast<const char*>(c.begin()), copy.data());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(c.begin()), c.size()), copy);
}

}  // namespace
}  // namespace client
}  // namespace tensorkeep
