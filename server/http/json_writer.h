// JsonWriter: writes JSON text in one pass into a string (the HTTP API's
// responses: server/http/api_v1.h). Commas are placed by the writer; keys and
// strings are escaped (RFC 8259, control characters as \uXXXX; bytes that are
// not UTF-8 pass through, names are validated on the way in); numbers that
// JSON cannot hold (NaN, ±Inf) are written as null.
//
// Thread safety: none.
#ifndef TENSORKEEP_SERVER_HTTP_JSON_WRITER_H_
#define TENSORKEEP_SERVER_HTTP_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tensorkeep {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The next member's key (inside an object).
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Number(double value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Separate();

  std::string out_;
  // Per open container: whether it has a member yet.
  std::vector<bool> has_member_;
  bool after_key_ = false;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_HTTP_JSON_WRITER_H_
