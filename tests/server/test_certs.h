// Test certificates made with the openssl command into a directory: a CA, a
// server certificate it signed for 127.0.0.1 and localhost, a client
// certificate it signed, and a client certificate of another CA (for refused
// mutual TLS). Tests skip, saying why, where openssl is missing.
#ifndef TENSORKEEP_TESTS_SERVER_TEST_CERTS_H_
#define TENSORKEEP_TESTS_SERVER_TEST_CERTS_H_

#include <cstdlib>
#include <fstream>
#include <string>

namespace tensorkeep {
namespace testing {

struct TestCerts {
  std::string ca;  // CA certificate (PEM)
  std::string server_cert, server_key;
  std::string client_cert, client_key;  // signed by `ca`
  std::string other_ca;                 // another CA
  std::string other_cert, other_key;    // a client certificate signed by `other_ca`
};

// Makes the certificates in `dir`; false (and `*why`) if openssl failed.
inline bool MakeTestCerts(const std::string& dir, TestCerts* certs, std::string* why) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    *why = "the openssl command is not installed (apt-get install openssl)";
    return false;
  }
  const std::string d = dir + "/";
  {
    std::ofstream ext(d + "server.ext");
    ext << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  }
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  auto ca = [&](const std::string& name) {
    return "openssl req -x509 " + key + " -keyout " + d + name + ".key -out " + d + name +
           ".pem -days 2 -subj /CN=tensorkeep-test-" + name;
  };
  auto leaf = [&](const std::string& name, const std::string& issuer, const std::string& cn,
                  const std::string& ext) {
    return "openssl req " + key + " -keyout " + d + name + ".key -out " + d + name +
           ".csr -subj /CN=" + cn + " && openssl x509 -req -in " + d + name + ".csr -CA " + d +
           issuer + ".pem -CAkey " + d + issuer + ".key -CAcreateserial -out " + d + name +
           ".pem -days 2" + ext;
  };
  const std::string script = "set -e; " + ca("ca") + "; " + ca("other_ca") + "; " +
                             leaf("server", "ca", "localhost", " -extfile " + d + "server.ext") +
                             "; " + leaf("client", "ca", "client", "") + "; " +
                             leaf("other", "other_ca", "intruder", "");
  const std::string log = d + "openssl.log";
  if (std::system(("(" + script + ") >" + log + " 2>&1").c_str()) != 0) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    *why = "openssl failed: " + text;
    return false;
  }
  certs->ca = d + "ca.pem";
  certs->server_cert = d + "server.pem";
  certs->server_key = d + "server.key";
  certs->client_cert = d + "client.pem";
  certs->client_key = d + "client.key";
  certs->other_ca = d + "other_ca.pem";
  certs->other_cert = d + "other.pem";
  certs->other_key = d + "other.key";
  return true;
}

}  // namespace testing
}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_SERVER_TEST_CERTS_H_
