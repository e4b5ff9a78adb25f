#include "server/http/http_errors.h"

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "server/http/json_writer.h"

namespace tensorkeep {

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:          // StepUnavailable: no such step
    case absl::StatusCode::kFailedPrecondition:  // TensorUnavailable: no such tensor
    case absl::StatusCode::kAborted:             // TensorUnavailableForStep
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnimplemented:
      return 501;
    default:
      return 500;
  }
}

void SendError(httplib::Response& response, const absl::Status& status) {
  response.status = HttpStatusOf(status);
  JsonWriter json;
  json.BeginObject().Key("error").BeginObject();
  json.Key("code").String(absl::StatusCodeToString(status.code()));
  json.Key("reason").String(std::string(ReasonName(GetReason(status))));
  json.Key("message").String(std::string(status.message()));
  json.EndObject().EndObject();
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    response.set_header("WWW-Authenticate", "Bearer realm=\"tensorkeep\"");
  }
  response.set_content(json.Take() + "\n", "application/json");
}

}  // namespace tensorkeep
