// ClientSecurity: how a client reaches a collector — TLS (the CA that signed
// the collector's certificate; a client certificate for mutual TLS) and the
// bearer token — from flags or, for what the flags leave empty, the
// environment. The one place that turns them into gRPC channel credentials,
// for the library, the CLI and tensorkeep-rules alike (Python's twin:
// client/python/tensorkeep/_credentials.py).
//
// Thread safety: functions are thread-safe.
#ifndef TENSORKEEP_CLIENT_CREDENTIALS_H_
#define TENSORKEEP_CLIENT_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace tensorkeep {

inline constexpr char kTlsCaEnv[] = "TENSORKEEP_TLS_CA";
inline constexpr char kTlsCertEnv[] = "TENSORKEEP_TLS_CERT";
inline constexpr char kTlsKeyEnv[] = "TENSORKEEP_TLS_KEY";
inline constexpr char kTokenEnv[] = "TENSORKEEP_TOKEN";

struct ClientSecurity {
  std::string tls_ca;    // PEM file of the CA to trust; empty: plaintext
  std::string tls_cert;  // PEM client certificate (mutual TLS), with tls_key
  std::string tls_key;
  std::string token;  // sent as "authorization: Bearer TOKEN"
  bool tls() const { return !tls_ca.empty(); }
};

// `flags` with each empty field taken from its environment variable.
ClientSecurity ResolveSecurity(ClientSecurity flags);

// The usage text of the four client flags, for --help.
const char* ClientSecurityUsage();

// Channel credentials for `address`: TLS when tls_ca is set (with the client
// certificate if given), the token as call credentials. A token without TLS
// is sent only to a loopback address (gRPC's local credentials); elsewhere it
// is an error rather than a token in clear text. Errors name the file or
// flag at fault.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientSecurity& security, const std::string& address);

// What the collector at `address` speaks, found by a TLS handshake attempt
// (at most ~4 s): used to explain an UNAVAILABLE when client and collector
// disagree about TLS.
enum class PeerTransport { kUnreachable, kTls, kPlaintext };
PeerTransport ProbeTransport(const std::string& address);

// What explains an UNAVAILABLE from `address` for a client using
// `client_tls`: `why` is the sentence ("" when the two ends agree about TLS:
// then it is not about TLS); `mismatch` is set when one end speaks TLS and
// the other does not, which no retry can cure.
struct TransportExplanation {
  std::string why;
  bool mismatch = false;
};
TransportExplanation ExplainTransportMismatch(const std::string& address, bool client_tls);

}  // namespace tensorkeep

#endif  // TENSORKEEP_CLIENT_CREDENTIALS_H_
