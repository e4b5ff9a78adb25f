// NumPy's .npy file format (numpy.lib.format): reading versions 1.0, 2.0 and
// 3.0, writing 1.0 (or 2.0 when the header does not fit 1.0's 16-bit length),
// byte for byte as numpy.save writes them.
//
// All functions here are thread-safe; the file functions are as safe as
// concurrent use of the same path allows.
#ifndef TENSORKEEP_TENSOR_NPY_H_
#define TENSORKEEP_TENSOR_NPY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/dtype.h"

namespace tensorkeep {

// An array in memory: `data` holds product(shape) elements of `dtype`,
// little-endian, in C (row-major) order. An empty shape is a 0-d array (one
// element); a zero dimension makes an empty array.
struct NpyArray {
  DType dtype;
  std::vector<int64_t> shape;
  std::string data;
};

// Parses the contents of a .npy file. Accepts the descrs of the nine DTypes
// with any byte-order mark ('<', '|', '=', or '>', whose data is byte-swapped
// to little-endian), e.g. '<f4', '|b1', '|u1', '<u1', '>i8', '?'; and
// fortran_order True, whose data is transposed to C order.
//
// Returns InvalidArgument, with a message saying what is wrong, for a file that
// is not a .npy file (bad magic), has an unknown version, is truncated (in the
// preamble, header or data), has a malformed header, has a dtype tensorkeep
// does not store (object, string, structured, complex, other widths), or whose
// data size does not match its shape (including trailing bytes).
absl::StatusOr<NpyArray> ParseNpy(std::string_view file_bytes);

// The .npy file of `array`, exactly as numpy.save writes it: version 1.0
// (2.0 if the header is longer than 65535 bytes), descr '<f2', '<f4', '<f8',
// '|i1', '<i2', '<i4', '<i8', '|u1' or '|b1', C order, header padded with
// spaces so that the data starts at a multiple of 64 bytes. numpy has no
// bfloat16: a kBFloat16 array is written as '<f4', each element widened
// exactly to the float32 it stands for.
// Precondition: `array.dtype` is valid and CheckValueSize(array.dtype,
// array.shape, array.data.size()) is OK; the bytes are written as they are
// otherwise, and ParseNpy would reject the result.
std::string EncodeNpy(const NpyArray& array);

// Reads and parses the .npy file at `path`. Returns NotFound if there is no
// such file, another error naming the path and the system's reason if it
// cannot be read, and ParseNpy's errors prefixed with the path.
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// Writes EncodeNpy(array) to `path`, replacing any file there. Returns
// InvalidArgument (writing nothing) if `array` breaks EncodeNpy's
// precondition, and an error naming the path and the system's reason if the
// file cannot be written (a failed write may leave a partial file).
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array);

}  // namespace tensorkeep

#endif  // TENSORKEEP_TENSOR_NPY_H_
