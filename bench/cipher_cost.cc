#include "bench/cipher_cost.h"

#include <openssl/evp.h>
#include <time.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tensorkeep {
namespace bench {
namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

}  // namespace

absl::StatusOr<double> AesGcmSealOpenSecondsPerGB(size_t total_bytes, size_t record_bytes,
                                                  int rounds) {
  if (record_bytes == 0 || record_bytes > 16384 || total_bytes < record_bytes) {
    return absl::InvalidArgumentError("records of 1..16384 bytes, at least one");
  }
  CipherCtx seal(EVP_CIPHER_CTX_new()), open(EVP_CIPHER_CTX_new());
  if (seal == nullptr || open == nullptr) return absl::InternalError("EVP_CIPHER_CTX_new failed");
  const unsigned char key[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                                 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
  if (EVP_EncryptInit_ex(seal.get(), EVP_aes_256_gcm(), nullptr, key, nullptr) != 1 ||
      EVP_DecryptInit_ex(open.get(), EVP_aes_256_gcm(), nullptr, key, nullptr) != 1) {
    return absl::InternalError("AES-256-GCM is not available from OpenSSL");
  }
  // A record's worth of data, as a TLS record carries (16 KiB at most).
  std::vector<unsigned char> plain(record_bytes), sealed(record_bytes), opened(record_bytes);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<unsigned char>(i * 131 + 7);
  const size_t records = total_bytes / record_bytes;
  double best = 0;
  for (int round = 0; round < std::max(rounds, 1); ++round) {
    const double start = ThreadCpuSeconds();
    for (size_t r = 0; r < records; ++r) {
      unsigned char iv[12] = {0};
      for (int b = 0; b < 8; ++b) iv[4 + b] = static_cast<unsigned char>(r >> (8 * b));
      unsigned char tag[16];
      int n = 0, tail = 0;
      const int len = static_cast<int>(record_bytes);
      if (EVP_EncryptInit_ex(seal.get(), nullptr, nullptr, nullptr, iv) != 1 ||
          EVP_EncryptUpdate(seal.get(), sealed.data(), &n, plain.data(), len) != 1 ||
          EVP_EncryptFinal_ex(seal.get(), sealed.data() + n, &tail) != 1 ||
          EVP_CIPHER_CTX_ctrl(seal.get(), EVP_CTRL_GCM_GET_TAG, sizeof(tag), tag) != 1) {
        return absl::InternalError("AES-256-GCM seal failed");
      }
      if (EVP_DecryptInit_ex(open.get(), nullptr, nullptr, nullptr, iv) != 1 ||
          EVP_DecryptUpdate(open.get(), opened.data(), &n, sealed.data(), len) != 1 ||
          EVP_CIPHER_CTX_ctrl(open.get(), EVP_CTRL_GCM_SET_TAG, sizeof(tag), tag) != 1 ||
          EVP_DecryptFinal_ex(open.get(), opened.data() + n, &tail) != 1) {
        return absl::InternalError("AES-256-GCM open failed (tag mismatch)");
      }
    }
    const double seconds = ThreadCpuSeconds() - start;
    if (opened != plain) return absl::InternalError("AES-256-GCM round trip changed the data");
    const double per_gb = seconds / (static_cast<double>(records * record_bytes) / 1e9);
    if (round == 0 || per_gb < best) best = per_gb;
  }
  return best;
}

}  // namespace bench
}  // namespace tensorkeep
