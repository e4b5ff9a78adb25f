// The web UI's pages on the HTTP port (docs/web-ui.md): `/` (the trials),
// `/trial/NAME`, `/compare?trials=A,B` all serve the one page (web/index.html,
// which routes on the path), and `/ui/...` its scripts, style sheet and
// Chart.js, embedded into the binary (web/web_assets.h).
//
// The files hold no data, so they are served without a token; the page asks
// for one when the JSON API answers 401 and sends it as `Authorization:
// Bearer` (the API's rules are unchanged). A Content-Security-Policy lets the
// page run only its own scripts and talk only to this collector.
#ifndef TENSORKEEP_SERVER_HTTP_WEB_UI_H_
#define TENSORKEEP_SERVER_HTTP_WEB_UI_H_

#include "server/http/http_server.h"

namespace tensorkeep {

// Registers the UI's routes on `http` (before Start).
void RegisterWebUi(HttpServer* http);

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_HTTP_WEB_UI_H_
