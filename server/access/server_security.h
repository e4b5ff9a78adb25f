// ServerSecurity: the collector's TLS, tokens and the secure-by-default rule,
// turned into gRPC server credentials.
//
//  * TLS (tls_cert + tls_key, PEM) through gRPC's OpenSSL credentials; with
//    tls_client_ca, mutual TLS: a client without a certificate signed by it
//    is refused at the handshake.
//  * Tokens (an AccessControl): its processor runs before any handler. gRPC
//    runs processors only on secure credentials, so without TLS tokens need a
//    loopback address (gRPC's local credentials: plain HTTP/2 on the wire).
//  * Listening beyond loopback needs TLS and tokens, unless `insecure`.
#ifndef TENSORKEEP_SERVER_ACCESS_SERVER_SECURITY_H_
#define TENSORKEEP_SERVER_ACCESS_SERVER_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/access/access_control.h"

namespace tensorkeep {

struct ServerSecurity {
  std::string tls_cert;       // PEM certificate chain
  std::string tls_key;        // PEM private key
  std::string tls_client_ca;  // PEM CA for client certificates (mutual TLS)
  std::string auth_tokens;    // token file (server/access/token_set.h)
  bool insecure = false;      // allow a non-loopback address without TLS and tokens
  bool tls() const { return !tls_cert.empty(); }
};

// The secure-by-default rule for an address `listen` (HOST:PORT) served
// with `security` (`tokens`: --auth-tokens given), named `flag` in the
// message (--listen, --http-listen): FailedPrecondition saying what to add
// for an address beyond loopback without TLS and tokens (unless insecure),
// InvalidArgument for tokens without TLS beyond loopback.
absl::Status CheckExposure(const ServerSecurity& security, const std::string& listen, bool tokens);

// Checks `security` for `listen` (HOST:PORT) — the secure-by-default rule and
// flags that need each other — and returns the credentials to listen with.
// `access` (null without tokens) gets its processor installed.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security, const std::string& listen, AccessControl* access);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_ACCESS_SERVER_SECURITY_H_
