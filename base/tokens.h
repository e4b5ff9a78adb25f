// Bearer tokens: their roles, their form in an --auth-tokens file
// ("sha256:<64 hex digits>" of the token's bytes; the file never holds a
// token), and new random tokens. Shared by the collector and `tensorkeep
// token-new`.
#ifndef TENSORKEEP_BASE_TOKENS_H_
#define TENSORKEEP_BASE_TOKENS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tensorkeep {

// What a token may do; each role includes those before it. kNone is for
// methods anyone may call (the health service).
enum class Role { kNone = 0, kRead = 1, kWrite = 2, kAdmin = 3 };
// "read", "write", "admin" (and "none").
const char* RoleName(Role role);
// The role named `name` ("read", "write" or "admin"), if any.
std::optional<Role> ParseRole(std::string_view name);

using TokenDigest = std::array<uint8_t, 32>;

TokenDigest Sha256(std::string_view token);
// "sha256:" followed by the digest in lowercase hex.
std::string TokenHashText(const TokenDigest& digest);
// Parses TokenHashText's format; false if `text` is not one.
bool ParseTokenHash(std::string_view text, TokenDigest* digest);
// Whether two digests are equal, in time independent of where they differ
// (CRYPTO_memcmp).
bool DigestsEqual(const TokenDigest& a, const TokenDigest& b);
// A new token: "tk_" and 43 URL-safe characters (32 random bytes from OpenSSL's
// RAND_bytes). Empty if the random generator failed.
std::string NewToken();

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_TOKENS_H_
