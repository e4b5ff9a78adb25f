#include "base/tokens.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

namespace tensorkeep {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kNone:
      return "none";
    case Role::kRead:
      return "read";
    case Role::kWrite:
      return "write";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

std::optional<Role> ParseRole(std::string_view name) {
  if (name == "read") return Role::kRead;
  if (name == "write") return Role::kWrite;
  if (name == "admin") return Role::kAdmin;
  return std::nullopt;
}

TokenDigest Sha256(std::string_view token) {
  TokenDigest d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

std::string TokenHashText(const TokenDigest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "sha256:";
  for (uint8_t b : digest) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

bool ParseTokenHash(std::string_view text, TokenDigest* digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (text.substr(0, kPrefix.size()) != kPrefix) return false;
  text.remove_prefix(kPrefix.size());
  if (text.size() != 64) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*digest)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

bool DigestsEqual(const TokenDigest& a, const TokenDigest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return "";
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  // Base64url without padding: 256 bits in 43 characters.
  std::string s = "tk_";
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char b : bytes) {
    acc = acc << 8 | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      s += kAlphabet[(acc >> bits) & 63];
    }
  }
  if (bits > 0) s += kAlphabet[(acc << (6 - bits)) & 63];
  return s;
}

}  // namespace tensorkeep
