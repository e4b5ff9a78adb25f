// What TLS's cipher alone costs, measured on this machine in the bench's run:
// the CPU seconds to seal and open (encrypt + authenticate, then verify +
// decrypt) 1 GB in 16 KiB records with AES-256-GCM through OpenSSL's EVP
// interface, the AEAD of TLS_AES_256_GCM_SHA384, the suite a tensorkeep
// client and collector negotiate (TLS 1.3 with OpenSSL 3's default order;
// gRPC 1.51 sets no TLS 1.3 suites). Every byte of a loopback ingest is
// sealed once by the client and opened once by the collector on the same
// CPUs, so this is the least TLS can add to the ingest's CPU per GB; the
// `secure` bench sets it against what TLS adds in fact.
//
// Thread safety: none needed (one thread, no shared state).
#ifndef TENSORKEEP_BENCH_CIPHER_COST_H_
#define TENSORKEEP_BENCH_CIPHER_COST_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace tensorkeep {
namespace bench {

// CPU seconds (this thread's) per 10^9 bytes to seal and open `total_bytes`
// of records of `record_bytes` each (at most TLS's 16 KiB), the fastest of
// `rounds` passes.
absl::StatusOr<double> AesGcmSealOpenSecondsPerGB(size_t total_bytes, size_t record_bytes = 16384,
                                                  int rounds = 3);

}  // namespace bench
}  // namespace tensorkeep

#endif  // TENSORKEEP_BENCH_CIPHER_COST_H_
