#include "server/access/server_security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/loopback.h"
#include "base/status_macros.h"

namespace tensorkeep {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", flag, " '", path, "'"));
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' is not a PEM file (no -----BEGIN line)"));
  }
  return s.str();
}

}  // namespace

absl::Status CheckExposure(const ServerSecurity& security, const std::string& listen,
                          bool tokens) {
  const bool loopback = IsLoopbackAddress(listen);
  if (!loopback && !security.insecure && (!security.tls() || !tokens)) {
    std::string missing;
    if (!security.tls()) missing = "--tls-cert FILE --tls-key FILE";
    if (!tokens) {
      absl::StrAppend(&missing, missing.empty() ? "" : " and ", "--auth-tokens FILE");
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to listen on ", listen,
        " (beyond this machine) without TLS and tokens: anyone who can reach the port could "
        "read every trial, stop or end anyone's training. Add ",
        missing, " (docs/shared-collector.md), or --insecure on a network you trust"));
  }
  if (!security.tls() && tokens && !loopback) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth-tokens without TLS works on loopback only (tokens would cross the network "
        "in clear text): add --tls-cert and --tls-key to listen on ",
        listen));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security, const std::string& listen, AccessControl* access) {
  if (security.tls_cert.empty() != security.tls_key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  if (!security.tls() && !security.tls_client_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca (mutual TLS) needs TLS: add --tls-cert and --tls-key");
  }
  TK_RETURN_IF_ERROR(CheckExposure(security, listen, access != nullptr));
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (security.tls()) {
    grpc::SslServerCredentialsOptions ssl(
        security.tls_client_ca.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    auto cert = ReadPem(security.tls_cert, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(security.tls_key, "--tls-key");
    if (!key.ok()) return key.status();
    pair.cert_chain = std::move(*cert);
    pair.private_key = std::move(*key);
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!security.tls_client_ca.empty()) {
      auto ca = ReadPem(security.tls_client_ca, "--tls-client-ca");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = std::move(*ca);
    }
    credentials = grpc::SslServerCredentials(ssl);
  } else if (access != nullptr) {
    credentials = grpc::experimental::LocalServerCredentials(LOCAL_TCP);
  } else {
    return grpc::InsecureServerCredentials();
  }
  if (access != nullptr) credentials->SetAuthMetadataProcessor(access->Processor());
  return credentials;
}

}  // namespace tensorkeep
