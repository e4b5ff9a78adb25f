// The input format of push_fuzzer: PushRequest messages back to back, each a
// 2-byte little-endian length and that many bytes. Shared by the fuzzer and
// the seed generator (make_corpus.cc).
#ifndef TENSORKEEP_TESTS_FUZZ_PUSH_STREAM_H_
#define TENSORKEEP_TESTS_FUZZ_PUSH_STREAM_H_

#include <string>
#include <string_view>

namespace tensorkeep {

// Takes the next message off `stream`; false at the end (a torn last message
// ends the stream too).
inline bool NextPushMessage(std::string_view* stream, std::string_view* message) {
  if (stream->size() < 2) return false;
  const size_t n = static_cast<unsigned char>((*stream)[0]) |
                   (static_cast<size_t>(static_cast<unsigned char>((*stream)[1])) << 8);
  if (stream->size() - 2 < n) return false;
  *message = stream->substr(2, n);
  stream->remove_prefix(2 + n);
  return true;
}

// Appends `message` (at most 65535 bytes) to `stream`.
inline void AppendPushMessage(std::string* stream, const std::string& message) {
  stream->push_back(static_cast<char>(message.size() & 0xFF));
  stream->push_back(static_cast<char>((message.size() >> 8) & 0xFF));
  stream->append(message);
}

}  // namespace tensorkeep

#endif  // TENSORKEEP_TESTS_FUZZ_PUSH_STREAM_H_
