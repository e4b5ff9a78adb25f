// The web UI's files (web/*.html, *.js, *.css and Debian's Chart.js), embedded
// into the binary at build time by web/embed_assets.cmake, so the collector
// serves its pages with nothing else to deploy (docs/web-ui.md).
#ifndef TENSORKEEP_WEB_WEB_ASSETS_H_
#define TENSORKEEP_WEB_WEB_ASSETS_H_

#include <cstddef>
#include <string_view>

namespace tensorkeep {

struct WebAsset {
  const char* path;          // the URL path: "/" or "/ui/app.js"
  const char* content_type;  // "text/javascript; charset=utf-8"
  const unsigned char* data;
  size_t size;
};

extern const WebAsset kWebAssets[];
extern const size_t kNumWebAssets;

// The asset served at `path`, or null.
const WebAsset* FindWebAsset(std::string_view path);

}  // namespace tensorkeep

#endif  // TENSORKEEP_WEB_WEB_ASSETS_H_
