#include "base/loopback.h"

#include <arpa/inet.h>

namespace tensorkeep {

std::string HostOf(std::string_view address) {
  for (std::string_view scheme : {"dns:///", "ipv4:", "ipv6:", "dns:"}) {
    if (address.substr(0, scheme.size()) == scheme) {
      address.remove_prefix(scheme.size());
      break;
    }
  }
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    return std::string(
        address.substr(1, close == std::string_view::npos ? address.npos : close - 1));
  }
  const size_t colon = address.rfind(':');
  return std::string(colon == std::string_view::npos ? address : address.substr(0, colon));
}

bool IsLoopbackAddress(std::string_view address) {
  if (address.substr(0, 5) == "unix:") return true;
  const std::string host = HostOf(address);
  if (host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace tensorkeep
