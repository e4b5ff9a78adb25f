#include "tensor/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {DType::kFloat16, DType::kFloat32, DType::kFloat64,
                                DType::kInt8,    DType::kInt16,   DType::kInt32,
                                DType::kInt64,   DType::kUInt8,   DType::kBool,    DType::kBFloat16};

uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// binary16 -> float computed independently of HalfToFloat's bit manipulation:
// (-1)^s * 2^(e-15) * (1 + m/1024), or 2^-14 * m/1024 for subnormals.
float ReferenceHalfToFloat(uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0x1f) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa / 1024.0, -14);
  } else {
    magnitude = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  }
  return static_cast<float>(sign ? -magnitude : magnitude);
}

TEST(DTypeTest, NamesAreNumpysAndRoundTripThroughParse) {
  const std::vector<std::string> expected = {"float16", "float32", "float64", "int8", "int16",
                                             "int32",   "int64",   "uint8",   "bool"};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(DTypeName(kAllDTypes[i]), expected[i]);
    absl::StatusOr<DType> parsed = ParseDType(expected[i]);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kAllDTypes[i]);
  }
}

TEST(DTypeTest, ParseRejectsUnknownNameAndListsAcceptedNames) {
  for (const char* name : {"float", "Float32", "f4", "", "complex64", "uint16"}) {
    absl::StatusOr<DType> parsed = ParseDType(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(),
                AllOf(HasSubstr(std::string("\"") + name + "\""),
                      HasSubstr("float16, float32, float64, int8, int16, int32, int64, uint8, "
                                "bool")));
  }
}

TEST(DTypeTest, NumbersMatchTheProtoEnum) {
  EXPECT_FALSE(IsValidDType(0));  // DTYPE_UNSPECIFIED
  EXPECT_FALSE(IsValidDType(11));
  EXPECT_FALSE(IsValidDType(-1));
  for (int value = 1; value <= 10; ++value) EXPECT_TRUE(IsValidDType(value)) << value;
  EXPECT_EQ(static_cast<int>(DType::kFloat16), 1);
  EXPECT_EQ(static_cast<int>(DType::kBool), 9);
  EXPECT_EQ(static_cast<int>(DType::kBFloat16), 10);  // tensorkeep.proto's BFLOAT16
}

TEST(DTypeTest, SizesAreNumpyItemsizes) {
  const std::vector<size_t> expected = {2, 4, 8, 1, 2, 4, 8, 1, 1};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(DTypeSize(kAllDTypes[i]), expected[i]) << DTypeName(kAllDTypes[i]);
  }
  EXPECT_EQ(DTypeSize(static_cast<DType>(0)), 0u);
  EXPECT_EQ(DTypeName(static_cast<DType>(42)), "invalid");
}

TEST(CheckValueSizeTest, AcceptsMatchingSizes) {
  EXPECT_TRUE(CheckValueSize(DType::kFloat32, {3, 4}, 48).ok());
  EXPECT_TRUE(CheckValueSize(DType::kFloat64, {}, 8).ok());  // scalar
  EXPECT_TRUE(CheckValueSize(DType::kInt16, {0}, 0).ok());
  EXPECT_TRUE(CheckValueSize(DType::kBool, {2, 0, 7}, 0).ok());
  EXPECT_TRUE(CheckValueSize(DType::kFloat16, {5, 1, 1}, 10).ok());
}

TEST(CheckValueSizeTest, RejectsMismatchNamingExpectedAndActualSizes) {
  absl::Status status = CheckValueSize(DType::kFloat32, {3, 4}, 40);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("40 bytes"), HasSubstr("needs 48 bytes"),
                                      HasSubstr("[3, 4]"), HasSubstr("float32")));
  EXPECT_FALSE(CheckValueSize(DType::kFloat64, {}, 0).ok());
  EXPECT_FALSE(CheckValueSize(DType::kInt8, {0}, 1).ok());
}

TEST(CheckValueSizeTest, RejectsNegativeDimension) {
  absl::Status status = CheckValueSize(DType::kInt32, {3, -1}, 12);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("negative dimension (-1 at index 1)"));
  // Even when another dimension is zero.
  EXPECT_FALSE(CheckValueSize(DType::kInt32, {0, -1}, 0).ok());
}

TEST(CheckValueSizeTest, RejectsShapeWhoseSizeOverflows) {
  const int64_t big = int64_t{1} << 40;
  absl::Status status = CheckValueSize(DType::kInt8, {big, big}, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("2^64"));
  // Elements fit in 64 bits, bytes do not.
  EXPECT_FALSE(CheckValueSize(DType::kFloat64, {int64_t{1} << 62}, 0).ok());
  // A product that wraps around to exactly the byte count must not pass.
  EXPECT_FALSE(CheckValueSize(DType::kInt8, {int64_t{1} << 32, int64_t{1} << 32}, 0).ok());
}

TEST(CheckValueSizeTest, ZeroDimensionMakesEmptyTensorDespiteHugeDimensions) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(CheckValueSize(DType::kFloat64, {huge, huge, 0}, 0).ok());
}

TEST(CheckValueSizeTest, RejectsInvalidDType) {
  absl::Status status = CheckValueSize(static_cast<DType>(0), {1}, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("invalid dtype 0"));
}

TEST(ConvertToFloat64Test, ConvertsEveryDTypeFromUnalignedMemory) {
  auto convert = [](DType dtype, const std::string& bytes) {
    // One byte of offset, so that multi-byte elements are misaligned.
    std::string buffer = "x" + bytes;
    std::vector<double> out(bytes.size() / DTypeSize(dtype));
    ConvertToFloat64(dtype, buffer.data() + 1, out.size(), out.data());
    return out;
  };
  auto bytes_of = [](const auto& values) {
    return std::string(reinterpret_cast<const char*>(values.data()),
                       values.size() * sizeof(values[0]));
  };
  using V = std::vector<double>;
  EXPECT_EQ(convert(DType::kFloat16, bytes_of(std::vector<uint16_t>{0x3c00, 0xc100, 0x0001})),
            (V{1.0, -2.5, std::ldexp(1.0, -24)}));
  EXPECT_EQ(convert(DType::kFloat32, bytes_of(std::vector<float>{0.1f, -3.0f})),
            (V{static_cast<double>(0.1f), -3.0}));
  EXPECT_EQ(convert(DType::kFloat64, bytes_of(std::vector<double>{0.1, -1e300})), (V{0.1, -1e300}));
  EXPECT_EQ(convert(DType::kInt8, bytes_of(std::vector<int8_t>{-128, 127})), (V{-128, 127}));
  EXPECT_EQ(convert(DType::kInt16, bytes_of(std::vector<int16_t>{-32768, 32767})),
            (V{-32768, 32767}));
  EXPECT_EQ(convert(DType::kInt32, bytes_of(std::vector<int32_t>{INT32_MIN, INT32_MAX})),
            (V{-2147483648.0, 2147483647.0}));
  // Beyond 2^53, to nearest (as numpy's astype(np.float64)).
  EXPECT_EQ(convert(DType::kInt64,
                    bytes_of(std::vector<int64_t>{INT64_MIN, INT64_MAX, (int64_t{1} << 53) + 1})),
            (V{-9223372036854775808.0, 9223372036854775808.0, 9007199254740992.0}));
  EXPECT_EQ(convert(DType::kUInt8, bytes_of(std::vector<uint8_t>{0, 255})), (V{0, 255}));
  EXPECT_EQ(convert(DType::kBool, std::string("\x00\x01\x02\xff", 4)), (V{0, 1, 1, 1}));
}

TEST(HalfTest, HalfToFloatIsExactForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    const float want = ReferenceHalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
      // The payload is kept.
      ASSERT_EQ((Bits(got) >> 13) & 0x3ff, h & 0x3ff) << std::hex << h;
    } else {
      // Bit equality also checks the sign of zero.
      ASSERT_EQ(Bits(got), Bits(want)) << std::hex << h;
    }
  }
}

TEST(HalfTest, FloatToHalfInvertsHalfToFloatForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = FloatToHalf(HalfToFloat(static_cast<uint16_t>(h)));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      ASSERT_EQ(back & 0x7c00, 0x7c00) << std::hex << h;  // still NaN ...
      ASSERT_NE(back & 0x3ff, 0) << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;  // ... of the same sign
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(HalfTest, FloatToHalfRoundsToNearestWithTiesToEven) {
  // For each pair of neighbouring non-negative halves (including the
  // subnormals and, past 65504, the would-be 65536 that overflows to
  // infinity), the midpoint goes to the even one and the floats just either
  // side of it to the nearer one. The same holds for the negatives.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = HalfToFloat(static_cast<uint16_t>(h));
    const float hi = h + 1 == 0x7c00 ? 65536.0f : HalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) / 2;  // exact: floats have 13 more bits
    const uint16_t even = static_cast<uint16_t>((h & 1) == 0 ? h : h + 1);
    ASSERT_EQ(FloatToHalf(mid), even) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, lo)), h) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, hi)), h + 1) << std::hex << h;
    ASSERT_EQ(FloatToHalf(-mid), even | 0x8000) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(-mid, -hi)), (h + 1) | 0x8000) << std::hex << h;
  }
}

TEST(HalfTest, FloatToHalfMatchesNumpy) {
  // Produced with numpy 1.24: hex(np.float16(np.float32(x)).view(np.uint16)).
  const std::vector<std::pair<float, uint16_t>> cases = {
      {0.1f, 0x2e66},
      {1.0f / 3, 0x3555},
      {65519.0f, 0x7bff},
      {65520.0f, 0x7c00},
      {1e-8f, 0x0000},
      {3e-8f, 0x0001},
      {5.9604645e-8f, 0x0001},
      {-2.5f, 0xc100},
      {1e5f, 0x7c00},
      {6.1e-5f, 0x03ff},
      {2.98e-8f, 0x0000},
      {-0.0f, 0x8000},
      {1.0009765625f, 0x3c01},
      {1.00048828125f, 0x3c00},
      {1.00146484375f, 0x3c02},
      {6.103515625e-05f, 0x0400},
      {6.097555160522461e-05f, 0x03ff},
  };
  for (const auto& [value, expected] : cases) {
    EXPECT_EQ(FloatToHalf(value), expected) << value;
  }
}

TEST(HalfTest, InfinitiesAndNaNsConvertBothWays) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(inf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00);
  EXPECT_EQ(HalfToFloat(0x7c00), inf);
  EXPECT_EQ(HalfToFloat(0xfc00), -inf);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lives only in the low 13 bits must not become inf.
  float low_payload_nan;
  const uint32_t bits = 0x7f800001u;
  std::memcpy(&low_payload_nan, &bits, sizeof(bits));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(low_payload_nan))));
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
}


// bfloat16 -> float computed independently of the shift: sign * (1 + m/128) *
// 2^(e-127), subnormals m/128 * 2^-126.
double BFloat16Reference(uint16_t b) {
  const int sign = (b & 0x8000) != 0 ? -1 : 1;
  const int exponent = (b >> 7) & 0xff;
  const int mantissa = b & 0x7f;
  if (exponent == 0) return sign * std::ldexp(mantissa / 128.0, -126);
  if (exponent == 0xff) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  return sign * std::ldexp(1.0 + mantissa / 128.0, exponent - 127);
}

TEST(BFloat16Test, BFloat16ToFloatIsExactForAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    const double expected = BFloat16Reference(static_cast<uint16_t>(b));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(f)) << b;
      EXPECT_EQ(std::signbit(f), (b & 0x8000) != 0) << b;
    } else {
      EXPECT_EQ(static_cast<double>(f), expected) << b;
    }
    // ConvertToFloat64 goes through the same value.
    const uint16_t le = static_cast<uint16_t>(b);
    char bytes[2];
    std::memcpy(bytes, &le, 2);
    double d;
    ConvertToFloat64(DType::kBFloat16, bytes, 1, &d);
    if (!std::isnan(expected)) EXPECT_EQ(d, expected) << b;
  }
}

TEST(BFloat16Test, FloatToBFloat16InvertsAndRoundsToNearestEven) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t pattern = static_cast<uint16_t>(b);
    const float f = BFloat16ToFloat(pattern);
    if (std::isnan(f)) {
      const uint16_t back = FloatToBFloat16(f);
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(back))) << b;
      continue;
    }
    EXPECT_EQ(FloatToBFloat16(f), pattern) << b;
  }
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even pattern (1).
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up.
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  // The largest float rounds to infinity, as torch does.
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::infinity()), 0xff80);
  // A signalling NaN becomes quiet, keeping its sign.
  const uint16_t nan = FloatToBFloat16([] {
    float f;
    const uint32_t bits = 0xff800001u;
    std::memcpy(&f, &bits, 4);
    return f;
  }());
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(nan)));
  EXPECT_NE(nan & 0x0040, 0);
  EXPECT_NE(nan & 0x8000, 0);
}

}  // namespace
}  // namespace tensorkeep
