#include "tensor/dtype.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensorkeep {
namespace {

constexpr DType kAllDTypes[] = {DType::kFloat16, DType::kFloat32, DType::kFloat64,
                                DType::kInt8,    DType::kInt16,   DType::kInt32,
                                DType::kInt64,   DType::kUInt8,   DType::kBool,    DType::kBFloat16};

uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// HalfToFloat for every bit pattern, so that converting a float16 tensor costs
// a load per element. 256 KiB, built on first use (thread-safe static).
const float* HalfTable() {
  static const std::array<float, 65536>* const table = [] {
    auto* t = new std::array<float, 65536>;
    for (uint32_t h = 0; h < 65536; ++h) (*t)[h] = HalfToFloat(static_cast<uint16_t>(h));
    return t;
  }();
  return table->data();
}

// Loads element `i` of little-endian type T from unaligned memory.
template <typename T>
T LoadAt(const char* src, size_t i) {
  T value;
  std::memcpy(&value, src + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void ConvertLoop(const char* src, size_t count, double* out) {
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<double>(LoadAt<T>(src, i));
}

// ConvertLoop<float> with SSE2's cvtps2pd, four floats at a time: the hot path
// of reductions on float32 tensors, which GCC at -O2 leaves scalar.
void ConvertFloats(const char* src, size_t count, double* out) {
  size_t i = 0;
#ifdef __SSE2__
  for (; i + 4 <= count; i += 4) {
    const __m128 floats = _mm_loadu_ps(reinterpret_cast<const float*>(src + 4 * i));
    _mm_storeu_pd(out + i, _mm_cvtps_pd(floats));
    _mm_storeu_pd(out + i + 2, _mm_cvtps_pd(_mm_movehl_ps(floats, floats)));
  }
#endif
  ConvertLoop<float>(src + 4 * i, count - i, out + i);
}

}  // namespace

bool IsValidDType(int value) {
  return value >= static_cast<int>(DType::kFloat16) && value <= static_cast<int>(DType::kBFloat16);
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kInt8:
      return 1;
    case DType::kInt16:
      return 2;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kUInt8:
      return 1;
    case DType::kBool:
      return 1;
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return "float16";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt8:
      return "int8";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
    case DType::kBool:
      return "bool";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (DTypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype \"", std::string(name), "\"; expected one of ",
      absl::StrJoin(kAllDTypes, ", ",
                    [](std::string* out, DType d) { out->append(std::string(DTypeName(d))); })));
}

absl::StatusOr<size_t> ElementCount(DType dtype, absl::Span<const char> data) {
  if (!IsValidDType(static_cast<int>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype ", static_cast<int>(dtype), " (expected 1..10)"));
  }
  const size_t item = DTypeSize(dtype);
  if (data.size() % item != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor data has ", data.size(), " bytes, not a multiple of the ", item,
                     "-byte size of ", std::string(DTypeName(dtype))));
  }
  return data.size() / item;
}

absl::Status CheckValueSize(DType dtype, absl::Span<const int64_t> shape, size_t bytes) {
  if (!IsValidDType(static_cast<int>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype ", static_cast<int>(dtype), " (expected 1..10)"));
  }
  const std::string shape_text = absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", shape_text, " has a negative dimension (", shape[i], " at index ", i, ")"));
    }
  }
  // A zero dimension makes the tensor empty however large the others are.
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  uint64_t elements = empty ? 0 : 1;
  bool overflow = false;
  for (size_t i = 0; !empty && !overflow && i < shape.size(); ++i) {
    const uint64_t dim = static_cast<uint64_t>(shape[i]);
    if (elements > std::numeric_limits<uint64_t>::max() / dim) {
      overflow = true;
    } else {
      elements *= dim;
    }
  }
  const uint64_t item = DTypeSize(dtype);
  if (overflow || elements > std::numeric_limits<uint64_t>::max() / item) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", shape_text, " of ",
                                                   std::string(DTypeName(dtype)),
                                                   " needs more than 2^64 bytes"));
  }
  const uint64_t expected = elements * item;
  if (expected != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value has ", bytes, " bytes but shape ", shape_text, " of ", std::string(DTypeName(dtype)),
        " needs ", expected, " bytes (", elements, " elements of ", item, " bytes)"));
  }
  return absl::OkStatus();
}

void ConvertToFloat64(DType dtype, const char* src, size_t count, double* out) {
  switch (dtype) {
    case DType::kFloat16: {
      const float* table = HalfTable();
      for (size_t i = 0; i < count; ++i) out[i] = table[LoadAt<uint16_t>(src, i)];
      return;
    }
    case DType::kFloat32:
      return ConvertFloats(src, count, out);
    case DType::kFloat64:
      std::memcpy(out, src, count * sizeof(double));
      return;
    case DType::kInt8:
      return ConvertLoop<int8_t>(src, count, out);
    case DType::kInt16:
      return ConvertLoop<int16_t>(src, count, out);
    case DType::kInt32:
      return ConvertLoop<int32_t>(src, count, out);
    case DType::kInt64:
      return ConvertLoop<int64_t>(src, count, out);
    case DType::kUInt8:
      return ConvertLoop<uint8_t>(src, count, out);
    case DType::kBool:
      for (size_t i = 0; i < count; ++i) out[i] = src[i] != 0 ? 1.0 : 0.0;
      return;
    case DType::kBFloat16:
      for (size_t i = 0; i < count; ++i) out[i] = BFloat16ToFloat(LoadAt<uint16_t>(src, i));
      return;
  }
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // infinity or NaN: keep the payload
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return BitsToFloat(sign | FloatBits(magnitude));
  }
  // Normal: rebias the exponent from 15 to 127.
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {
    if (magnitude == 0x7f800000u) return sign | 0x7c00u;  // infinity
    // NaN: keep the top of the payload and set the quiet bit, which also keeps
    // the result from turning into an infinity.
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {
    // Below 2^-14, the smallest normal float16: the result is a multiple of
    // 2^-24. (Rounding up may give 0x400, the smallest normal, which is right.)
    if (magnitude <= 0x33000000u) return sign;  // <= 2^-25 rounds to zero
    const uint32_t exponent = magnitude >> 23;  // 102..112
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias the exponent and round away 13 mantissa bits; a carry out of
  // the mantissa correctly increments the exponent.
  uint32_t result = (magnitude - 0x38000000u) >> 13;
  const uint32_t remainder = magnitude & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

float BFloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBFloat16(float f) {
  const uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, set quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit. A
  // carry into the exponent is right (up to infinity for the largest values).
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace tensorkeep
