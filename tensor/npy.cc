#include "tensor/npy.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// numpy.lib.format's ARRAY_ALIGN and GROWTH_AXIS_MAX_DIGITS: the data starts
// at a multiple of 64 bytes, and the header leaves room for the first
// dimension to grow to 21 digits.
constexpr size_t kArrayAlign = 64;
constexpr size_t kGrowthAxisMaxDigits = 21;

// numpy's descr of each DType as numpy.save writes it.
std::string_view Descr(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return "<f2";
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kInt8:
      return "|i1";
    case DType::kInt16:
      return "<i2";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kUInt8:
      return "|u1";
    case DType::kBool:
      return "|b1";
    case DType::kBFloat16:
      return "<f4";  // numpy has no bfloat16: EncodeNpy widens to float32
  }
  return "";
}

// Python's repr of the tuple `shape`: "()", "(3,)", "(2, 3)".
std::string ShapeRepr(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// `text` quoted for an error message, cut short if long.
std::string Quote(std::string_view text) {
  constexpr size_t kMaxShown = 200;
  if (text.size() <= kMaxShown) return absl::StrCat("\"", std::string(text), "\"");
  return absl::StrCat("\"", std::string(text.substr(0, kMaxShown)), "\"... (", text.size(),
                      " bytes)");
}

struct Descriptor {
  DType dtype;
  bool big_endian;
};

absl::StatusOr<Descriptor> ParseDescr(std::string_view descr) {
  std::string_view type = descr;
  char order = '=';
  if (!type.empty() && std::string_view("<>|=").find(type[0]) != std::string_view::npos) {
    order = type[0];
    type.remove_prefix(1);
  }
  static constexpr std::pair<std::string_view, DType> kTypes[] = {
      {"f2", DType::kFloat16}, {"f4", DType::kFloat32}, {"f8", DType::kFloat64},
      {"i1", DType::kInt8},    {"i2", DType::kInt16},   {"i4", DType::kInt32},
      {"i8", DType::kInt64},   {"u1", DType::kUInt8},   {"b1", DType::kBool},
      {"?", DType::kBool}};
  for (const auto& [name, dtype] : kTypes) {
    if (type == name) return Descriptor{dtype, order == '>' && DTypeSize(dtype) > 1};
  }
  if (!type.empty() && type[0] == 'O') {
    return absl::InvalidArgumentError(
        absl::StrCat("the .npy file holds an object array (descr '", std::string(descr),
                     "'), i.e. pickled Python objects, which tensorkeep does not read; save a "
                     "numeric array instead (e.g. np.asarray(x, dtype=np.float32))"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the .npy file has dtype descr '", std::string(descr),
      "', which tensorkeep does not store; supported are float16, float32, float64, int8, "
      "int16, int32, int64, uint8 and bool ('<f2', '<f4', '<f8', '|i1', '<i2', '<i4', '<i8', "
      "'|u1', '|b1', in any byte order)"));
}

// The header dictionary of a .npy file.
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Parses the Python literal numpy writes as the header, e.g.
// "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", accepting
// what numpy's reader accepts of it: either quote, any spacing, trailing
// commas, Python 2's long suffix ("3L"), keys in any order.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Header> Parse() {
    Header header;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      TK_ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipSpace();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after key '", key, "'"));
      SkipSpace();
      if (key == "descr" && !seen_descr) {
        seen_descr = true;
        if (Peek() == '[') {
          return absl::InvalidArgumentError(
              "the .npy file holds a structured (record) array, which tensorkeep does not read; "
              "save each field as its own array");
        }
        TK_ASSIGN_OR_RETURN(header.descr, ParseString());
      } else if (key == "fortran_order" && !seen_fortran) {
        seen_fortran = true;
        TK_ASSIGN_OR_RETURN(header.fortran_order, ParseBool());
      } else if (key == "shape" && !seen_shape) {
        seen_shape = true;
        TK_ASSIGN_OR_RETURN(header.shape, ParseShape());
      } else if (key == "descr" || key == "fortran_order" || key == "shape") {
        return Error(absl::StrCat("key '", key, "' appears twice"));
      } else {
        return Error(absl::StrCat("unexpected key '", key,
                                  "' (a .npy header has exactly 'descr', 'fortran_order' and "
                                  "'shape')"));
      }
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Error("expected ',' or '}'");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after '}'");
    if (!seen_descr || !seen_fortran || !seen_shape) {
      std::vector<std::string> missing;
      if (!seen_descr) missing.push_back("'descr'");
      if (!seen_fortran) missing.push_back("'fortran_order'");
      if (!seen_shape) missing.push_back("'shape'");
      return absl::InvalidArgumentError(absl::StrCat("malformed .npy header ", Quote(text_),
                                                     ": missing ", absl::StrJoin(missing, ", ")));
    }
    return header;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           std::string_view(" \t\r\n").find(text_[pos_]) != std::string_view::npos) {
      ++pos_;
    }
  }

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed .npy header ", Quote(text_), ": ",
                                                   std::string(what), " at offset ", pos_));
  }

  // A Python string literal in single or double quotes, without escapes.
  absl::StatusOr<std::string> ParseString() {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return Error("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    if (value.find('\\') != std::string::npos) return Error("unsupported escape in string");
    pos_ = end + 1;
    return value;
  }

  absl::StatusOr<bool> ParseBool() {
    for (const auto& [word, value] : {std::pair<std::string_view, bool>{"True", true},
                                      std::pair<std::string_view, bool>{"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    return Error("expected True or False for 'fortran_order'");
  }

  // A tuple of non-negative integers: "()", "(3,)", "(2, 3)", "(2, 3,)".
  absl::StatusOr<std::vector<int64_t>> ParseShape() {
    std::vector<int64_t> shape;
    if (!Consume('(')) return Error("expected a tuple for 'shape'");
    while (true) {
      SkipSpace();
      if (Consume(')')) break;
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) {
        return Error("expected a non-negative integer in 'shape'");
      }
      int64_t dim = 0;
      while (std::isdigit(static_cast<unsigned char>(Peek()))) {
        const int digit = text_[pos_++] - '0';
        if (dim > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          return Error("dimension too large in 'shape'");
        }
        dim = dim * 10 + digit;
      }
      Consume('L');
      shape.push_back(dim);
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(')')) break;
      return Error("expected ',' or ')' in 'shape'");
    }
    return shape;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// Reverses the bytes of each of the `count` elements of `size` bytes in `data`.
void SwapBytes(char* data, size_t count, size_t size) {
  for (size_t i = 0; i < count; ++i) {
    char* element = data + i * size;
    for (size_t a = 0, b = size - 1; a < b; ++a, --b) std::swap(element[a], element[b]);
  }
}

// The C-order copy of the Fortran-order (column-major) array `src` of `shape`.
std::string FortranToC(std::string_view src, const std::vector<int64_t>& shape, size_t size,
                       size_t elements) {
  std::string out(src.size(), '\0');
  const size_t rank = shape.size();
  // Stride, in elements, of each axis in the Fortran layout.
  std::vector<size_t> stride(rank);
  size_t s = 1;
  for (size_t axis = 0; axis < rank; ++axis) {
    stride[axis] = s;
    s *= static_cast<size_t>(shape[axis]);
  }
  // Walk the C order with an odometer over the index, the last axis fastest,
  // keeping `offset` = the element's position in `src`.
  std::vector<int64_t> index(rank, 0);
  size_t offset = 0;
  for (size_t i = 0; i < elements; ++i) {
    std::memcpy(&out[i * size], src.data() + offset * size, size);
    for (size_t axis = rank; axis-- > 0;) {
      if (++index[axis] < shape[axis]) {
        offset += stride[axis];
        break;
      }
      offset -= stride[axis] * static_cast<size_t>(shape[axis] - 1);
      index[axis] = 0;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(std::string_view file_bytes) {
  const std::string_view magic(kMagic, kMagicSize);
  const std::string_view head = file_bytes.substr(0, kMagicSize);
  if (head != magic.substr(0, head.size())) {
    return absl::InvalidArgumentError(
        "not a .npy file: it does not start with the magic string \"\\x93NUMPY\"");
  }
  if (file_bytes.size() < kMagicSize + 2) {
    return absl::InvalidArgumentError(absl::StrCat("truncated .npy file: ", file_bytes.size(),
                                                   " bytes, shorter than the preamble"));
  }
  const int major = static_cast<unsigned char>(file_bytes[6]);
  const int minor = static_cast<unsigned char>(file_bytes[7]);
  if (minor != 0 || major < 1 || major > 3) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported .npy format version ", major, ".",
                                                   minor, " (1.0, 2.0 and 3.0 are read)"));
  }
  const size_t length_size = major == 1 ? 2 : 4;
  const size_t preamble = kMagicSize + 2 + length_size;
  if (file_bytes.size() < preamble) {
    return absl::InvalidArgumentError(absl::StrCat("truncated .npy file: ", file_bytes.size(),
                                                   " bytes, shorter than the preamble"));
  }
  size_t header_length = 0;
  for (size_t i = 0; i < length_size; ++i) {
    header_length |= static_cast<size_t>(static_cast<unsigned char>(file_bytes[8 + i])) << (8 * i);
  }
  if (file_bytes.size() - preamble < header_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated .npy file: the header should be ", header_length,
                     " bytes but only ", file_bytes.size() - preamble, " follow the preamble"));
  }
  TK_ASSIGN_OR_RETURN(const Header header,
                      HeaderParser(file_bytes.substr(preamble, header_length)).Parse());
  TK_ASSIGN_OR_RETURN(const Descriptor descriptor, ParseDescr(header.descr));

  const size_t size = DTypeSize(descriptor.dtype);
  const std::string_view data = file_bytes.substr(preamble + header_length);
  const std::string shape_text = ShapeRepr(header.shape);
  // product(shape) * size, checked for overflow; an empty array is empty
  // whatever its other dimensions.
  size_t elements = 1;
  bool empty = false;
  for (int64_t dim : header.shape) empty = empty || dim == 0;
  if (empty) {
    elements = 0;
  } else {
    for (int64_t dim : header.shape) {
      if (elements > std::numeric_limits<size_t>::max() / size / static_cast<size_t>(dim)) {
        return absl::InvalidArgumentError(absl::StrCat("the .npy header's shape ", shape_text,
                                                       " has too many elements to be read"));
      }
      elements *= static_cast<size_t>(dim);
    }
  }
  const size_t expected = elements * size;
  if (data.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        data.size() < expected ? "truncated .npy file" : ".npy file with trailing bytes",
        ": shape ", shape_text, " of '", header.descr, "' needs ", expected,
        " bytes of data but the file has ", data.size(), " after the header"));
  }

  NpyArray array;
  array.dtype = descriptor.dtype;
  array.shape = header.shape;
  if (header.fortran_order && header.shape.size() > 1) {
    array.data = FortranToC(data, header.shape, size, elements);
  } else {
    array.data = std::string(data);
  }
  if (descriptor.big_endian) SwapBytes(array.data.data(), elements, size);
  return array;
}

std::string EncodeNpy(const NpyArray& array) {
  std::string header =
      absl::StrCat("{'descr': '", std::string(Descr(array.dtype)),
                   "', 'fortran_order': False, 'shape': ", ShapeRepr(array.shape), ", }");
  if (!array.shape.empty()) {
    const size_t digits = absl::StrCat(array.shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) header.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  // numpy's _wrap_header: pad with 1..64 spaces and a newline so that the data
  // starts at a multiple of 64; version 2.0 only if the length needs 32 bits.
  const size_t text_length = header.size() + 1;
  int major = 1;
  size_t preamble = kMagicSize + 2 + 2;
  size_t padding = kArrayAlign - (preamble + text_length) % kArrayAlign;
  if (text_length + padding > 0xffff) {
    major = 2;
    preamble = kMagicSize + 2 + 4;
    padding = kArrayAlign - (preamble + text_length) % kArrayAlign;
  }
  const size_t header_length = text_length + padding;

  std::string out;
  out.reserve(preamble + header_length + array.data.size());
  out.append(kMagic, kMagicSize);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  for (size_t i = 0; i < preamble - kMagicSize - 2; ++i) {
    out.push_back(static_cast<char>((header_length >> (8 * i)) & 0xff));
  }
  out.append(header);
  out.append(padding, ' ');
  out.push_back('\n');
  if (array.dtype == DType::kBFloat16) {
    // Each bfloat16 is the top half of the float32 it stands for: exact.
    const size_t n = array.data.size() / 2;
    out.reserve(out.size() + 4 * n);
    for (size_t i = 0; i < n; ++i) {
      out.append(2, '\0');
      out.append(array.data, 2 * i, 2);
    }
  } else {
    out.append(array.data);
  }
  return out;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string bytes;
  char buffer[1 << 16];
  size_t read;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
    bytes.append(buffer, read);
  }
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  }
  absl::StatusOr<NpyArray> array = ParseNpy(bytes);
  if (!array.ok()) {
    return absl::Status(array.status().code(), absl::StrCat(path, ": ", array.status().message()));
  }
  return array;
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  TK_RETURN_IF_ERROR(CheckValueSize(array.dtype, array.shape, array.data.size()));
  const std::string bytes = EncodeNpy(array);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "wb"),
                                                       &std::fclose);
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  if (std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  if (std::fclose(file.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace tensorkeep
