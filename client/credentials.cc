#include "client/credentials.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/loopback.h"

namespace tensorkeep {
namespace {

std::string FromEnv(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(env);
  return v != nullptr ? v : "";
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " '", path, "'"));
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' is not a PEM file (no -----BEGIN line)"));
  }
  return s.str();
}

}  // namespace

ClientSecurity ResolveSecurity(ClientSecurity flags) {
  flags.tls_ca = FromEnv(flags.tls_ca, kTlsCaEnv);
  flags.tls_cert = FromEnv(flags.tls_cert, kTlsCertEnv);
  flags.tls_key = FromEnv(flags.tls_key, kTlsKeyEnv);
  flags.token = FromEnv(flags.token, kTokenEnv);
  return flags;
}

const char* ClientSecurityUsage() {
  return "  --tls-ca FILE        connect with TLS, trusting the CA certificate in FILE\n"
         "                       (default: $TENSORKEEP_TLS_CA; unset: plaintext)\n"
         "  --tls-cert FILE      client certificate for mutual TLS ($TENSORKEEP_TLS_CERT)\n"
         "  --tls-key FILE       its private key ($TENSORKEEP_TLS_KEY)\n"
         "  --token TOKEN        bearer token for a collector with --auth-tokens\n"
         "                       ($TENSORKEEP_TOKEN)\n";
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientSecurity& security, const std::string& address) {
  std::shared_ptr<grpc::ChannelCredentials> channel;
  if (security.tls()) {
    grpc::SslCredentialsOptions ssl;
    auto ca = ReadPem(security.tls_ca, "--tls-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = std::move(*ca);
    if (security.tls_cert.empty() != security.tls_key.empty()) {
      return absl::InvalidArgumentError(
          "mutual TLS needs both --tls-cert and --tls-key (or TENSORKEEP_TLS_CERT and "
          "TENSORKEEP_TLS_KEY)");
    }
    if (!security.tls_cert.empty()) {
      auto cert = ReadPem(security.tls_cert, "--tls-cert");
      if (!cert.ok()) return cert.status();
      auto key = ReadPem(security.tls_key, "--tls-key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = std::move(*cert);
      ssl.pem_private_key = std::move(*key);
    }
    channel = grpc::SslCredentials(ssl);
  } else if (!security.tls_cert.empty() || !security.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert/--tls-key need --tls-ca (or TENSORKEEP_TLS_CA): the CA that signed the "
        "collector's certificate");
  } else if (!security.token.empty()) {
    if (!IsLoopbackAddress(address)) {
      return absl::InvalidArgumentError(
          absl::StrCat("a token would cross the network in clear text to ", address,
                       ": connect with TLS (--tls-ca FILE or TENSORKEEP_TLS_CA)"));
    }
    // gRPC sends call credentials only over a secure channel; a loopback
    // connection counts as one with local credentials (no handshake: the
    // wire is plain HTTP/2, as with insecure credentials).
    channel = grpc::experimental::LocalCredentials(LOCAL_TCP);
  } else {
    return grpc::InsecureChannelCredentials();
  }
  if (security.token.empty()) return channel;
  return grpc::CompositeChannelCredentials(channel, grpc::AccessTokenCredentials(security.token));
}

PeerTransport ProbeTransport(const std::string& address) {
  const std::string host = HostOf(address);
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return PeerTransport::kUnreachable;
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return PeerTransport::kUnreachable;
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  bool connected = false;
  if (fd >= 0) {
    int rc = connect(fd, found->ai_addr, found->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      rc = (poll(&p, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
            err == 0)
               ? 0
               : -1;
    }
    connected = rc == 0;
  }
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    return PeerTransport::kUnreachable;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // A TLS server answers a ClientHello with its certificate; a plaintext
  // gRPC server sends HTTP/2 frames (or closes), which is no TLS record.
  PeerTransport result = PeerTransport::kPlaintext;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx != nullptr) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    SSL* ssl = SSL_new(ctx);
    if (ssl != nullptr) {
      static const unsigned char kAlpn[] = {2, 'h', '2'};
      SSL_set_alpn_protos(ssl, kAlpn, sizeof(kAlpn));
      SSL_set_fd(ssl, fd);
      const int rc = SSL_connect(ssl);
      X509* peer = SSL_get1_peer_certificate(ssl);
      const int error = SSL_get_error(ssl, rc);
      if (rc == 1 || peer != nullptr) {
        result = PeerTransport::kTls;
      } else if (error != SSL_ERROR_SSL && error != SSL_ERROR_ZERO_RETURN &&
                 !(error == SSL_ERROR_SYSCALL && (errno == 0 || errno == ECONNRESET))) {
        // No answer in time (a loaded or slow peer): say nothing rather than
        // guess.
        result = PeerTransport::kUnreachable;
      }
      if (peer != nullptr) X509_free(peer);
      SSL_free(ssl);
    }
    SSL_CTX_free(ctx);
  }
  ERR_clear_error();
  close(fd);
  return result;
}

TransportExplanation ExplainTransportMismatch(const std::string& address, bool client_tls) {
  switch (ProbeTransport(address)) {
    case PeerTransport::kTls:
      if (!client_tls) {
        return {absl::StrCat("the collector at ", address,
                             " uses TLS but this client connects in plaintext: pass --tls-ca "
                             "FILE (or set TENSORKEEP_TLS_CA) with the CA that signed its "
                             "certificate"),
                true};
      }
      return {absl::StrCat("the TLS handshake with the collector at ", address,
                           " failed: is --tls-ca the CA that signed its certificate, does the "
                           "certificate name this address, and, if it requires client "
                           "certificates (mutual TLS), are --tls-cert/--tls-key one it accepts?"),
              false};
    case PeerTransport::kPlaintext:
      if (client_tls) {
        return {absl::StrCat("the collector at ", address,
                             " does not use TLS but this client does (--tls-ca or "
                             "TENSORKEEP_TLS_CA): drop it, or start the collector with "
                             "--tls-cert/--tls-key"),
                true};
      }
      return {};
    case PeerTransport::kUnreachable:
      return {};
  }
  return {};
}

}  // namespace tensorkeep
