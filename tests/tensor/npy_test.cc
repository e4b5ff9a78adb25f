#include "tensor/npy.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/dtype.h"

namespace tensorkeep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

template <typename T>
std::string BytesOf(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A .npy file written by hand: magic, version, little-endian header length,
// `header` padded with spaces (as numpy does, though the reader does not
// care) and a newline, then `data`.
std::string MakeNpy(const std::string& header, const std::string& data, int major = 1) {
  const size_t length_size = major == 1 ? 2 : 4;
  std::string padded = header;
  while ((6 + 2 + length_size + padded.size() + 1) % 64 != 0) padded.push_back(' ');
  padded.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  for (size_t i = 0; i < length_size; ++i) {
    out.push_back(static_cast<char>((padded.size() >> (8 * i)) & 0xff));
  }
  return out + padded + data;
}

// The bytes numpy 1.24's np.save writes for a version 1.0 file whose header
// dict is `dict` followed by `spaces` spaces and a newline (the header length
// field is always 0x76 = 118 for the small arrays here).
std::string NumpyFile(const std::string& dict, size_t spaces, const std::string& data) {
  return std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(spaces, ' ') + "\n" +
         data;
}

NpyArray Parse(const std::string& bytes) {
  absl::StatusOr<NpyArray> array = ParseNpy(bytes);
  EXPECT_TRUE(array.ok()) << array.status();
  return array.ok() ? *array : NpyArray{};
}

std::string ParseError(const std::string& bytes) {
  absl::StatusOr<NpyArray> array = ParseNpy(bytes);
  EXPECT_FALSE(array.ok());
  if (array.ok()) return "";
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(array.status().message());
}

TEST(NpyTest, EncodesExactlyAsNumpySaves) {
  // Produced with numpy 1.24's np.save; the counts are the trailing spaces of
  // its header, the data is the hex it wrote.
  EXPECT_EQ(EncodeNpy({DType::kFloat32, {3}, BytesOf(std::vector<float>{1, 2, 3})}),
            NumpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 60,
                      std::string("\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40", 12)));
  EXPECT_EQ(EncodeNpy({DType::kFloat64, {}, BytesOf(std::vector<double>{2.5})}),
            NumpyFile("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 62,
                      std::string("\x00\x00\x00\x00\x00\x00\x04\x40", 8)));
  EXPECT_EQ(EncodeNpy({DType::kBool, {2, 3}, std::string("\x01\x00\x01\x00\x00\x01", 6)}),
            NumpyFile("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }", 58,
                      std::string("\x01\x00\x01\x00\x00\x01", 6)));
  EXPECT_EQ(EncodeNpy({DType::kInt8, {0}, ""}),
            NumpyFile("{'descr': '|i1', 'fortran_order': False, 'shape': (0,), }", 60, ""));
  EXPECT_EQ(EncodeNpy({DType::kInt16, {2, 2}, BytesOf(std::vector<int16_t>{1, -2, 300, -32768})}),
            NumpyFile("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 2), }", 58,
                      std::string("\x01\x00\xfe\xff\x2c\x01\x00\x80", 8)));
  EXPECT_EQ(
      EncodeNpy({DType::kFloat16, {12345678901, 0}, ""}),
      NumpyFile("{'descr': '<f2', 'fortran_order': False, 'shape': (12345678901, 0), }", 48, ""));
}

TEST(NpyTest, DataStartsAtAMultipleOf64) {
  for (size_t rank = 0; rank < 40; ++rank) {
    const NpyArray array{DType::kUInt8, std::vector<int64_t>(rank, 1), "x"};
    const std::string file = EncodeNpy(array);
    EXPECT_EQ((file.size() - 1) % 64, 0u) << rank;
    EXPECT_EQ(file[file.size() - 2], '\n') << rank;
  }
}

class NpyRoundTripTest : public ::testing::TestWithParam<std::tuple<DType, std::vector<int64_t>>> {
};

TEST_P(NpyRoundTripTest, ParseInvertsEncode) {
  const auto& [dtype, shape] = GetParam();
  size_t elements = 1;
  for (int64_t dim : shape) elements *= static_cast<size_t>(dim);
  NpyArray array{dtype, shape, ""};
  for (size_t i = 0; i < elements * DTypeSize(dtype); ++i) {
    array.data.push_back(static_cast<char>(dtype == DType::kBool ? i % 2 : i * 37 + 11));
  }
  const NpyArray parsed = Parse(EncodeNpy(array));
  EXPECT_EQ(parsed.dtype, dtype);
  EXPECT_EQ(parsed.shape, shape);
  EXPECT_EQ(parsed.data, array.data);
}

std::string RoundTripName(
    const ::testing::TestParamInfo<std::tuple<DType, std::vector<int64_t>>>& info) {
  std::string name(DTypeName(std::get<0>(info.param)));
  name += "_shape";
  for (int64_t dim : std::get<1>(info.param)) name += "_" + std::to_string(dim);
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    AllDTypesAndShapes, NpyRoundTripTest,
    ::testing::Combine(::testing::Values(DType::kFloat16, DType::kFloat32, DType::kFloat64,
                                         DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64,
                                         DType::kUInt8, DType::kBool),
                       ::testing::Values(std::vector<int64_t>{}, std::vector<int64_t>{0},
                                         std::vector<int64_t>{5}, std::vector<int64_t>{2, 3},
                                         std::vector<int64_t>{2, 0, 3},
                                         std::vector<int64_t>{1, 2, 3, 4})),
    RoundTripName);

TEST(NpyTest, ParsesEveryAcceptedDescr) {
  const std::vector<std::pair<std::string, DType>> cases = {
      {"<f2", DType::kFloat16}, {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64},
      {"|i1", DType::kInt8},    {"<i2", DType::kInt16},   {"<i4", DType::kInt32},
      {"<i8", DType::kInt64},   {"|u1", DType::kUInt8},   {"|b1", DType::kBool},
      {"<u1", DType::kUInt8},   {"<b1", DType::kBool},    {"=f4", DType::kFloat32},
      {"<i1", DType::kInt8},    {"?", DType::kBool},      {"|?", DType::kBool},
      {">i1", DType::kInt8},    {"f8", DType::kFloat64}};
  for (const auto& [descr, dtype] : cases) {
    const std::string data(DTypeSize(dtype), '\x01');
    const NpyArray array =
        Parse(MakeNpy("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (1,), }", data));
    EXPECT_EQ(array.dtype, dtype) << descr;
    EXPECT_EQ(array.data, data) << descr;
  }
}

TEST(NpyTest, ByteSwapsBigEndianData) {
  // numpy 1.24 writes np.array([1.5, -2.0], dtype='>f4') as 3fc00000 c0000000.
  NpyArray array = Parse(MakeNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
                                 std::string("\x3f\xc0\x00\x00\xc0\x00\x00\x00", 8)));
  EXPECT_EQ(array.dtype, DType::kFloat32);
  EXPECT_EQ(array.data, BytesOf(std::vector<float>{1.5f, -2.0f}));

  array = Parse(MakeNpy("{'descr': '>i2', 'fortran_order': False, 'shape': (3,), }",
                        std::string("\x00\x01\xff\xfe\x80\x00", 6)));
  EXPECT_EQ(array.data, BytesOf(std::vector<int16_t>{1, -2, -32768}));

  array = Parse(MakeNpy("{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }",
                        std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8)));
  EXPECT_EQ(array.data, BytesOf(std::vector<int64_t>{0x0102030405060708}));

  array = Parse(MakeNpy("{'descr': '>f2', 'fortran_order': False, 'shape': (), }",
                        std::string("\x3c\x00", 2)));
  EXPECT_EQ(array.data, BytesOf(std::vector<uint16_t>{0x3c00}));

  array = Parse(MakeNpy("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }",
                        std::string("\xc0\x04\x00\x00\x00\x00\x00\x00", 8)));
  EXPECT_EQ(array.data, BytesOf(std::vector<double>{-2.5}));
}

TEST(NpyTest, TransposesFortranOrderToCOrder) {
  // numpy 1.24 writes np.asfortranarray(np.arange(6, dtype='<i4').reshape(2, 3))
  // with fortran_order True and the data 0, 3, 1, 4, 2, 5.
  NpyArray array = Parse(MakeNpy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                                 BytesOf(std::vector<int32_t>{0, 3, 1, 4, 2, 5})));
  EXPECT_THAT(array.shape, ElementsAre(2, 3));
  EXPECT_EQ(array.data, BytesOf(std::vector<int32_t>{0, 1, 2, 3, 4, 5}));

  // 2x3x4: element (i, j, k) is at i + 2j + 6k in Fortran order.
  std::vector<int16_t> fortran(24), c(24);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) {
        const int16_t value = static_cast<int16_t>(100 * i + 10 * j + k);
        fortran[i + 2 * j + 6 * k] = value;
        c[12 * i + 4 * j + k] = value;
      }
    }
  }
  array = Parse(
      MakeNpy("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3, 4), }", BytesOf(fortran)));
  EXPECT_EQ(array.data, BytesOf(c));

  // Fortran order and big-endian together.
  array = Parse(MakeNpy("{'descr': '>i2', 'fortran_order': True, 'shape': (2, 2), }",
                        std::string("\x00\x01\x00\x03\x00\x02\x00\x04", 8)));
  EXPECT_EQ(array.data, BytesOf(std::vector<int16_t>{1, 2, 3, 4}));

  // 1-d, 0-d and empty arrays are the same in both orders.
  array = Parse(MakeNpy("{'descr': '|u1', 'fortran_order': True, 'shape': (3,), }", "abc"));
  EXPECT_EQ(array.data, "abc");
  array = Parse(MakeNpy("{'descr': '|u1', 'fortran_order': True, 'shape': (), }", "z"));
  EXPECT_EQ(array.data, "z");
  array = Parse(MakeNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 0, 2), }", ""));
  EXPECT_THAT(array.data, IsEmpty());
}

TEST(NpyTest, ParsesVersion2And3Headers) {
  const std::string data = BytesOf(std::vector<float>{1, 2, 3});
  for (int major : {2, 3}) {
    const NpyArray array =
        Parse(MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", data, major));
    EXPECT_EQ(array.dtype, DType::kFloat32) << major;
    EXPECT_THAT(array.shape, ElementsAre(3)) << major;
    EXPECT_EQ(array.data, data) << major;
  }
}

TEST(NpyTest, EncodesVersion2WhenTheHeaderNeedsIt) {
  // 30000 dimensions of 1 make a header longer than 65535 bytes.
  const NpyArray array{DType::kInt32, std::vector<int64_t>(30000, 1),
                       BytesOf(std::vector<int32_t>{7})};
  const std::string file = EncodeNpy(array);
  EXPECT_EQ(file[6], '\x02');
  EXPECT_EQ(file[7], '\x00');
  EXPECT_EQ((file.size() - 4) % 64, 0u);
  const NpyArray parsed = Parse(file);
  EXPECT_EQ(parsed.shape, array.shape);
  EXPECT_EQ(parsed.data, array.data);
  // While one that fits stays at 1.0.
  EXPECT_EQ(EncodeNpy({DType::kInt32, std::vector<int64_t>(1000, 1), array.data})[6], '\x01');
}

TEST(NpyTest, AcceptsTheHeaderVariantsNumpyAccepts) {
  const std::string data = BytesOf(std::vector<int16_t>{1, 2, 3, 4, 5, 6});
  for (const std::string header : {
           "{\"descr\": \"<i2\", \"fortran_order\": False, \"shape\": (2, 3)}",
           "{'shape': (2, 3), 'fortran_order': False, 'descr': '<i2'}",
           "{'descr':'<i2','fortran_order':False,'shape':(2,3,),}",
           "  { 'descr' : '<i2' , 'fortran_order' : False , 'shape' : ( 2 , 3 ) }  ",
           "{'descr': '<i2', 'fortran_order': False, 'shape': (2L, 3L), }",
       }) {
    const NpyArray array = Parse(MakeNpy(header, data));
    EXPECT_THAT(array.shape, ElementsAre(2, 3)) << header;
    EXPECT_EQ(array.data, data) << header;
  }
}

TEST(NpyTest, RejectsBadMagic) {
  EXPECT_THAT(ParseError("PK\x03\x04 this is a zip file"), HasSubstr("not a .npy file"));
  std::string file = EncodeNpy({DType::kUInt8, {1}, "x"});
  file[1] = 'n';
  EXPECT_THAT(ParseError(file), HasSubstr("magic string"));
}

TEST(NpyTest, RejectsTruncatedFilesAtEveryPoint) {
  const std::string file = EncodeNpy({DType::kFloat32, {2, 2}, std::string(16, '\x01')});
  for (size_t size = 0; size < file.size(); ++size) {
    EXPECT_THAT(ParseError(file.substr(0, size)), HasSubstr("truncated")) << size;
  }
  EXPECT_THAT(ParseError(file.substr(0, file.size() - 3)),
              HasSubstr("needs 16 bytes of data but the file has 13"));
  EXPECT_THAT(ParseError(file.substr(0, 20)), HasSubstr("the header should be 118 bytes"));
}

TEST(NpyTest, RejectsDataThatDoesNotMatchTheShape) {
  const std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_THAT(ParseError(MakeNpy(header, std::string(28, '\0'))),
              HasSubstr("shape (2, 3) of '<i4' needs 24 bytes of data but the file has 28"));
  EXPECT_THAT(ParseError(MakeNpy(header, std::string(28, '\0'))), HasSubstr("trailing bytes"));
  EXPECT_THAT(ParseError(MakeNpy(header, std::string(20, '\0'))), HasSubstr("truncated"));
  EXPECT_THAT(ParseError(MakeNpy("{'descr': '<f8', 'fortran_order': False, 'shape': "
                                 "(4294967296, 4294967296), }",
                                 "")),
              HasSubstr("too many elements"));
}

TEST(NpyTest, RejectsUnsupportedDTypesNamingThem) {
  for (const std::string descr : {"<c8", "<u2", "<U10", "|S5", "<f16", "<M8[ns]", "<i3"}) {
    const std::string message = ParseError(
        MakeNpy("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (1,), }", "1234"));
    EXPECT_THAT(message, HasSubstr("descr '" + descr + "'")) << descr;
    EXPECT_THAT(message, HasSubstr("supported are float16, float32")) << descr;
  }
  EXPECT_THAT(ParseError(MakeNpy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
                                 std::string(8, '\0'))),
              HasSubstr("object array"));
  EXPECT_THAT(ParseError(MakeNpy("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': "
                                 "False, 'shape': (1,), }",
                                 std::string(8, '\0'))),
              HasSubstr("structured"));
}

TEST(NpyTest, RejectsUnknownVersions) {
  std::string file = EncodeNpy({DType::kUInt8, {1}, "x"});
  file[6] = '\x04';
  EXPECT_THAT(ParseError(file), HasSubstr("unsupported .npy format version 4.0"));
  file[6] = '\x01';
  file[7] = '\x01';
  EXPECT_THAT(ParseError(file), HasSubstr("version 1.1"));
}

TEST(NpyTest, RejectsMalformedHeaders) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{'descr': '<f4', 'fortran_order': False}", "missing 'shape'"},
      {"{'descr': '<f4', 'shape': (1,)}", "missing 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
       "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
       "'descr' appears twice"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}", "expected True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", "expected a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}", "expected ',' or ')'"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", "expected ',' or '}'"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", "expected ':' after key 'descr'"},
      {"('descr', '<f4')", "expected '{'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing", "after '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "too large"},
      {"{'descr': '<f4", "unterminated string"},
  };
  for (const auto& [header, expected] : cases) {
    const std::string message = ParseError(MakeNpy(header, "1234"));
    EXPECT_THAT(message, HasSubstr("malformed .npy header")) << header;
    EXPECT_THAT(message, HasSubstr(expected)) << header;
  }
}

class NpyFileTest : public ::testing::Test {
 protected:
  std::string PathFor(const std::string& name) {
    return ::testing::TempDir() + "/npy_test_" + std::to_string(::getpid()) + "_" + name;
  }
};

TEST_F(NpyFileTest, WriteThenReadRoundTrips) {
  const std::string path = PathFor("roundtrip.npy");
  const NpyArray array{DType::kFloat64, {2, 2}, BytesOf(std::vector<double>{1, 2, 3, 4})};
  ASSERT_TRUE(WriteNpyFile(path, array).ok());
  absl::StatusOr<NpyArray> read = ReadNpyFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->dtype, array.dtype);
  EXPECT_EQ(read->shape, array.shape);
  EXPECT_EQ(read->data, array.data);
  // Writing again replaces the file.
  const NpyArray smaller{DType::kUInt8, {1}, "z"};
  ASSERT_TRUE(WriteNpyFile(path, smaller).ok());
  read = ReadNpyFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->data, "z");
  std::remove(path.c_str());
}

TEST_F(NpyFileTest, ReadingAMissingFileIsNotFound) {
  absl::StatusOr<NpyArray> read = ReadNpyFile(PathFor("does_not_exist.npy"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr("does_not_exist.npy"));
}

TEST_F(NpyFileTest, ParseErrorsNameThePath) {
  const std::string path = PathFor("garbage.npy");
  FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  std::fputs("garbage", file);
  std::fclose(file);
  absl::StatusOr<NpyArray> read = ReadNpyFile(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr(path + ": not a .npy file"));
  std::remove(path.c_str());
}

TEST_F(NpyFileTest, WriteRejectsAnArrayWhoseDataDoesNotMatchItsShape) {
  const std::string path = PathFor("bad.npy");
  absl::Status status = WriteNpyFile(path, {DType::kInt32, {3}, std::string(8, '\0')});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("needs 12 bytes"));
  EXPECT_EQ(ReadNpyFile(path).status().code(), absl::StatusCode::kNotFound);  // nothing written
}

TEST_F(NpyFileTest, WriteIntoAMissingDirectoryFails) {
  absl::Status status = WriteNpyFile(PathFor("no_such_dir") + "/x.npy", {DType::kUInt8, {1}, "x"});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("no_such_dir"));
}

TEST(NpyTest, WritesBFloat16AsTheFloat32ItStandsFor) {
  // numpy has no bfloat16: the file is '<f4' with each element widened exactly.
  const std::vector<uint16_t> patterns = {0x3f80, 0xc040, 0x0001, 0x7f80, 0x8000, 0x4049};
  std::string data(patterns.size() * 2, '\0');
  std::memcpy(data.data(), patterns.data(), data.size());
  const NpyArray parsed = Parse(EncodeNpy({DType::kBFloat16, {2, 3}, data}));
  EXPECT_EQ(parsed.dtype, DType::kFloat32);
  EXPECT_EQ(parsed.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(parsed.data.size(), patterns.size() * 4);
  for (size_t i = 0; i < patterns.size(); ++i) {
    float f;
    std::memcpy(&f, parsed.data.data() + 4 * i, 4);
    EXPECT_EQ(f, BFloat16ToFloat(patterns[i])) << i;
  }
  float first;
  std::memcpy(&first, parsed.data.data(), 4);
  EXPECT_EQ(first, 1.0f);
}

}  // namespace
}  // namespace tensorkeep
