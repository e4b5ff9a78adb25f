#include "tfrecord/crc32c.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace tensorkeep {
namespace tfrecord {
namespace {

// Bit-at-a-time CRC-32C straight from the definition, as an independent check
// of the table-driven one.
uint32_t BitwiseCrc32c(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32c, PublishedCheckValue) {
  // The "check" value of CRC-32C (Castagnoli) in every CRC catalogue.
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32c, Rfc3720Vectors) {
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down), 0x113FDB5Cu);
  // The iSCSI read command PDU of B.4.
  const unsigned char pdu[48] = {0x01, 0xC0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
                                 0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(Crc32c(std::string(reinterpret_cast<const char*>(pdu), 48)), 0xD9963A56u);
}

TEST(Crc32c, MatchesBitwiseDefinitionOnRandomData) {
  std::mt19937 rng(7);
  for (size_t n : {0u, 1u, 3u, 4u, 5u, 7u, 8u, 63u, 64u, 1000u, 4099u}) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    EXPECT_EQ(Crc32c(s), BitwiseCrc32c(s)) << n;
  }
}

TEST(Crc32c, ExtendEqualsWhole) {
  const std::string a = "hello, ", b = "tensorboard world";
  EXPECT_EQ(Crc32cExtend(Crc32c(a), b.data(), b.size()), Crc32c(a + b));
}

TEST(Crc32c, MaskRoundTripsAndDiffers) {
  for (uint32_t x : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x12345678u}) {
    EXPECT_EQ(UnmaskCrc(MaskCrc(x)), x);
    EXPECT_NE(MaskCrc(x), x);
  }
  // TensorFlow's mask: rotate right 15, add 0xa282ead8.
  EXPECT_EQ(MaskCrc(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u);
}

}  // namespace
}  // namespace tfrecord
}  // namespace tensorkeep
