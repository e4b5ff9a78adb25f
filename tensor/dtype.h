// Element types of the tensors tensorkeep stores, their sizes and numpy names,
// the size check every stored value goes through, and IEEE binary16 (float16)
// and bfloat16 conversions.
//
// All functions here are pure and thread-safe.
#ifndef TENSORKEEP_TENSOR_DTYPE_H_
#define TENSORKEEP_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tensorkeep {

// The element type of a tensor. The numbers equal those of the proto enum
// `tensorkeep.DType` (0 there means "unspecified" and is not a valid DType).
// Values are stored little-endian; kBool is one byte per element, 0 or 1.
enum class DType : int {
  kFloat16 = 1,
  kFloat32 = 2,
  kFloat64 = 3,
  kInt8 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kUInt8 = 8,
  kBool = 9,
  kBFloat16 = 10,  // the top 16 bits of an IEEE binary32
};

// True if `value` is the number of one of the DType enumerators (1..10).
bool IsValidDType(int value);

// Bytes per element of `dtype` (1, 2, 4 or 8); 0 for a value that is not a
// valid DType.
size_t DTypeSize(DType dtype);

// numpy's name of `dtype`: "float16", "float32", "float64", "int8", "int16",
// "int32", "int64", "uint8" or "bool" (and "bfloat16", the name torch and
// ml_dtypes use); "invalid" for a value that is not a valid DType.
std::string_view DTypeName(DType dtype);

// The inverse of DTypeName: the DType whose numpy name is `name` (exact,
// case-sensitive match). Returns InvalidArgument, listing the accepted names,
// for any other string.
absl::StatusOr<DType> ParseDType(std::string_view name);

// Checks that a value of `bytes` bytes holds exactly a tensor of `dtype` and
// `shape`, i.e. bytes == product(shape) * DTypeSize(dtype). An empty shape is a
// scalar (one element). Returns OK if so; otherwise InvalidArgument naming the
// expected and actual sizes, or saying that `dtype` is invalid, that a
// dimension is negative, or that the size overflows 64 bits.
absl::Status CheckValueSize(DType dtype, absl::Span<const int64_t> shape, size_t bytes);

// The number of elements of `dtype` in `data`; InvalidArgument when `dtype`
// is invalid or `data` is not a whole number of its elements.
absl::StatusOr<size_t> ElementCount(DType dtype, absl::Span<const char> data);

// Converts `count` elements of `dtype` starting at `src` (little-endian, any
// alignment) to float64 into `out[0..count)`, as numpy's `astype(np.float64)`
// does: exact for every type except int64 values beyond 2^53 (rounded to
// nearest); bool bytes count as 0 (zero byte) or 1 (any other byte). `src`
// must hold count * DTypeSize(dtype) bytes and `dtype` must be valid.
void ConvertToFloat64(DType dtype, const char* src, size_t count, double* out);

// Calls `visit(const double* x, size_t count)` on consecutive blocks of the
// elements of `data` converted to float64 (1,024 at a time: 8 KiB, still in
// L1 when `visit` reads them). `dtype` must be valid and `data` a whole
// number of its elements (ElementCount).
template <typename Visit>
void ForEachAsFloat64(DType dtype, absl::Span<const char> data, Visit visit) {
  constexpr size_t kBlock = 1024;
  const size_t item = DTypeSize(dtype);
  const size_t n = data.size() / item;
  alignas(64) double block[kBlock];
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = n - start < kBlock ? n - start : kBlock;
    ConvertToFloat64(dtype, data.data() + start * item, count, block);
    visit(static_cast<const double*>(block), count);
  }
}

// The value of the IEEE 754 binary16 number with bit pattern `h`. Exact for
// every pattern: subnormals, signed zeros and infinities map to the same
// float32 values, NaNs to float32 NaNs of the same sign with the payload kept.
float HalfToFloat(uint16_t h);

// The binary16 bit pattern nearest to `f`, ties to even (IEEE's default
// rounding, as numpy's astype(np.float16)). Finite values at or beyond 65520 in
// magnitude become infinities, values at or below 2^-25 in magnitude signed
// zeros; NaNs stay (quiet) NaNs of the same sign.
uint16_t FloatToHalf(float f);

// The value of the bfloat16 number with bit pattern `b`: exact for every
// pattern (bfloat16 is binary32 with the low 16 mantissa bits cut off).
float BFloat16ToFloat(uint16_t b);

// The bfloat16 bit pattern nearest to `f`, ties to even, as torch's
// `.to(torch.bfloat16)`; NaNs stay quiet NaNs of the same sign.
uint16_t FloatToBFloat16(float f);

}  // namespace tensorkeep

#endif  // TENSORKEEP_TENSOR_DTYPE_H_
