#include "server/http/web_ui.h"

#include "web/web_assets.h"

namespace tensorkeep {
namespace {

void Send(const WebAsset& asset, httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; "
                 "style-src 'self' 'unsafe-inline'; base-uri 'none'; form-action 'self'; "
                 "frame-ancestors 'none'");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_content(reinterpret_cast<const char*>(asset.data), asset.size, asset.content_type);
}

}  // namespace

void RegisterWebUi(HttpServer* http) {
  const WebAsset* page = FindWebAsset("/");
  // The page's own routes: it reads location.pathname.
  http->Get("/|/trial/[^/]+|/compare", Role::kNone,
            [page](const httplib::Request&, const CallAccess&, httplib::Response& res) {
              Send(*page, res);
            });
  http->Get("/ui/[A-Za-z0-9_.-]+", Role::kNone,
            [](const httplib::Request& req, const CallAccess&, httplib::Response& res) {
              const WebAsset* asset = FindWebAsset(req.path);
              if (asset == nullptr || req.path == "/") {
                res.status = 404;  // the error handler writes the JSON body
                return;
              }
              Send(*asset, res);
            });
}

}  // namespace tensorkeep
