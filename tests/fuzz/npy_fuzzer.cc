// Fuzzes ParseNpy (tensor/npy.h), the parser of the untrusted .npy bytes a
// user hands to the Python client's and the tools' readers.
//
// Checked besides "no crash, no sanitizer report": whatever ParseNpy accepts
// is a consistent array (CheckValueSize agrees with its data), and writing it
// back with EncodeNpy and parsing that gives the same array.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tensor/dtype.h"
#include "tensor/npy.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorkeep;  // NOLINT: a fuzz entry point, not a header
  auto array = ParseNpy(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!array.ok()) return 0;
  TK_FUZZ_CHECK(CheckValueSize(array->dtype, array->shape, array->data.size()).ok());
  TK_FUZZ_CHECK(array->data.size() <= size);
  auto again = ParseNpy(EncodeNpy(*array));
  TK_FUZZ_CHECK(again.ok());
  TK_FUZZ_CHECK(again->dtype == array->dtype);
  TK_FUZZ_CHECK(again->shape == array->shape);
  TK_FUZZ_CHECK(again->data == array->data);
  return 0;
}
