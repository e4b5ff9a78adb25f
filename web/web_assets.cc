#include "web/web_assets.h"

namespace tensorkeep {

const WebAsset* FindWebAsset(std::string_view path) {
  for (size_t i = 0; i < kNumWebAssets; ++i) {
    if (path == kWebAssets[i].path) return &kWebAssets[i];
  }
  return nullptr;
}

}  // namespace tensorkeep
