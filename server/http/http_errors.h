// How the HTTP port reports a failed request: the HTTP status for an
// absl::Status, and a JSON body naming it:
//   {"error": {"code": "NOT_FOUND", "reason": "TRIAL_NOT_FOUND", "message": "..."}}
#ifndef TENSORKEEP_SERVER_HTTP_HTTP_ERRORS_H_
#define TENSORKEEP_SERVER_HTTP_HTTP_ERRORS_H_

#include "absl/status/status.h"
#include "httplib.h"

namespace tensorkeep {

// 400 bad request, 401 no or unknown token, 403 not allowed, 404 not found
// (trial, tensor or step), 409 conflict, 429 limits, 503 unavailable, 500 otherwise.
int HttpStatusOf(const absl::Status& status);
void SendError(httplib::Response& response, const absl::Status& status);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_HTTP_HTTP_ERRORS_H_
