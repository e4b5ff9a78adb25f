// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78) and the
// "masked" form TFRecord files store (TensorFlow's crc32c::Mask).
//
// Debian 12 ships no CRC-32C library, so this is a small slice-by-4
// table-driven implementation. All functions are pure and thread-safe.
#ifndef TENSORKEEP_TFRECORD_CRC32C_H_
#define TENSORKEEP_TFRECORD_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tensorkeep {
namespace tfrecord {

// The CRC-32C of `data` continued from `crc` (the CRC of what came before;
// 0 for nothing): Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);
inline uint32_t Crc32c(std::string_view data) { return Crc32cExtend(0, data.data(), data.size()); }

// TFRecord stores CRCs masked, so that the CRC of a string containing
// embedded CRCs is not degenerate: rotate right by 15 bits, add a constant.
constexpr uint32_t kMaskDelta = 0xA282EAD8u;
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}
inline uint32_t MaskedCrc32c(std::string_view data) { return MaskCrc(Crc32c(data)); }

}  // namespace tfrecord
}  // namespace tensorkeep

#endif  // TENSORKEEP_TFRECORD_CRC32C_H_
