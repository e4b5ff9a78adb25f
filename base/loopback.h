// Whether a HOST:PORT address stays on this machine: 127.0.0.0/8, ::1,
// "localhost", or a unix: socket. The collector needs TLS and tokens to listen
// on anything else, and clients send tokens without TLS only to these.
#ifndef TENSORKEEP_BASE_LOOPBACK_H_
#define TENSORKEEP_BASE_LOOPBACK_H_

#include <string>
#include <string_view>

namespace tensorkeep {

// The host part of "HOST:PORT", "[V6]:PORT" or "dns:///HOST:PORT"
// (brackets removed).
std::string HostOf(std::string_view address);
bool IsLoopbackAddress(std::string_view address);

}  // namespace tensorkeep

#endif  // TENSORKEEP_BASE_LOOPBACK_H_
