#include "base/rendezvous.h"

#include <openssl/sha.h>

#include <algorithm>
#include <utility>

namespace tensorkeep {

uint64_t RendezvousScore(std::string_view collector, std::string_view trial) {
  std::string text;
  text.reserve(collector.size() + 1 + trial.size());
  text.append(collector).append("\n").append(trial);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  uint64_t score = 0;
  for (int i = 0; i < 8; ++i) score = (score << 8) | digest[i];
  return score;
}

std::vector<std::string> RendezvousRanking(const std::vector<std::string>& collectors,
                                           std::string_view trial) {
  std::vector<std::pair<uint64_t, std::string>> scored;
  scored.reserve(collectors.size());
  for (const auto& c : collectors) scored.emplace_back(RendezvousScore(c, trial), c);
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> out;
  out.reserve(scored.size());
  for (auto& s : scored) out.push_back(std::move(s.second));
  return out;
}

std::string RendezvousOwner(const std::vector<std::string>& collectors, std::string_view trial) {
  std::string best;
  uint64_t best_score = 0;
  for (const auto& c : collectors) {
    const uint64_t s = RendezvousScore(c, trial);
    if (best.empty() || s > best_score || (s == best_score && c < best)) {
      best = c;
      best_score = s;
    }
  }
  return best;
}

}  // namespace tensorkeep
