#include "storage/keys.h"

#include <cassert>

namespace tensorkeep {

KeyBuilder::KeyBuilder(KeyFamily family) { key_.push_back(static_cast<char>(family)); }

KeyBuilder& KeyBuilder::Str(std::string_view s) {
  assert(s.size() <= kMaxKeyComponent);
  key_.push_back(static_cast<char>((s.size() >> 8) & 0xFF));
  key_.push_back(static_cast<char>(s.size() & 0xFF));
  key_.append(s.data(), s.size());
  return *this;
}

KeyBuilder& KeyBuilder::U64(uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    key_.push_back(static_cast<char>((v >> shift) & 0xFF));
  }
  return *this;
}

bool KeyReader::Family(KeyFamily* family) {
  if (rest_.empty()) return false;
  *family = static_cast<KeyFamily>(static_cast<uint8_t>(rest_[0]));
  rest_.remove_prefix(1);
  return true;
}

bool KeyReader::Str(std::string_view* s) {
  if (rest_.size() < 2) return false;
  const size_t n =
      (static_cast<size_t>(static_cast<uint8_t>(rest_[0])) << 8) | static_cast<uint8_t>(rest_[1]);
  if (rest_.size() < 2 + n) return false;
  *s = rest_.substr(2, n);
  rest_.remove_prefix(2 + n);
  return true;
}

bool KeyReader::U64(uint64_t* v) {
  if (rest_.size() < 8) return false;
  uint64_t out = 0;
  for (int i = 0; i < 8; ++i) out = (out << 8) | static_cast<uint8_t>(rest_[i]);
  *v = out;
  rest_.remove_prefix(8);
  return true;
}

std::string FormatKey() { return KeyBuilder(KeyFamily::kFormat).Take(); }

std::string TrialKey(std::string_view trial) {
  return KeyBuilder(KeyFamily::kTrial).Str(trial).Take();
}
std::string WorkerKey(std::string_view trial, std::string_view worker) {
  return KeyBuilder(KeyFamily::kWorker).Str(trial).Str(worker).Take();
}
std::string BlockKey(std::string_view trial, uint64_t step, std::string_view worker,
                     uint64_t block_id) {
  return KeyBuilder(KeyFamily::kBlock).Str(trial).U64(step).Str(worker).U64(block_id).Take();
}
std::string ValueKey(std::string_view trial, uint64_t step, std::string_view worker,
                     uint64_t block_id, std::string_view name) {
  return KeyBuilder(KeyFamily::kValue)
      .U64(block_id)
      .Str(trial)
      .U64(step)
      .Str(worker)
      .Str(name)
      .Take();
}
std::string RuleKey(std::string_view trial, std::string_view rule) {
  return KeyBuilder(KeyFamily::kRule).Str(trial).Str(rule).Take();
}
std::string CollectionsKey(std::string_view trial, std::string_view worker) {
  return KeyBuilder(KeyFamily::kCollections).Str(trial).Str(worker).Take();
}
std::string ValueGarbageKey(uint64_t file) {
  return KeyBuilder(KeyFamily::kValueGarbage).U64(file).Take();
}
std::string DeletedTrialKey(std::string_view trial, uint64_t block_bound) {
  return KeyBuilder(KeyFamily::kDeletedTrial).Str(trial).U64(block_bound).Take();
}
std::string BlockValuesPrefix(uint64_t block_id, std::string_view trial) {
  return KeyBuilder(KeyFamily::kValue).U64(block_id).Str(trial).Take();
}
std::string_view ValueKeyTrial(std::string_view key) {
  KeyReader r(key);
  KeyFamily family;
  uint64_t block_id = 0;
  std::string_view trial;
  if (!r.Family(&family) || family != KeyFamily::kValue || !r.U64(&block_id) || !r.Str(&trial)) {
    return {};
  }
  return trial;
}
std::string FamilyPrefix(KeyFamily family) { return KeyBuilder(family).Take(); }
std::string TrialPrefix(KeyFamily family, std::string_view trial) {
  return KeyBuilder(family).Str(trial).Take();
}

}  // namespace tensorkeep
