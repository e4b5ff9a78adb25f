// LevelDbTensorStore's garbage collection of the value log: what its files
// hold and how much of it is garbage (Space), and ReclaimValueSpace, which
// copies the live values out of files mostly garbage and drops them. A crash
// at any stage leaves every live value reachable (tests/storage: the "gc.*"
// fault points).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "leveldb/write_batch.h"
#include "storage/keys.h"
#include "storage/leveldb_tensor_store.h"
#include "storage/leveldb_tensor_store_impl.h"
#include "storage/stored.pb.h"
#include "storage/value_log.h"

namespace tensorkeep {

TensorStore::SpaceStats LevelDbTensorStore::Space() {
  SpaceStats out;
  std::map<uint64_t, uint64_t> garbage;
  {
    absl::MutexLock lock(&impl_->write_mu);
    garbage = impl_->garbage;
  }
  for (const auto& [file, size] : impl_->values->Files()) {
    ++out.value_files;
    out.value_bytes += size;
    auto g = garbage.find(file);
    if (g != garbage.end()) out.value_garbage_bytes += std::min(size, g->second);
  }
  return out;
}

absl::StatusOr<TensorStore::ReclaimStats> LevelDbTensorStore::ReclaimValueSpace() {
  absl::MutexLock reclaiming(&impl_->reclaim_mu);
  ReclaimStats stats;
  // A second round when the first one's count found garbage the counters
  // missed (copies a crashed reclaim left): those files qualify then.
  for (int round = 0; round < 2; ++round) {
    bool recounted = false;
    TK_RETURN_IF_ERROR(ReclaimRound(&stats, &recounted));
    if (!recounted) break;
  }
  return stats;
}

absl::Status LevelDbTensorStore::ReclaimRound(ReclaimStats* stats, bool* recounted) {
  const double keep = impl_->options.value_gc_live_fraction;
  std::map<uint64_t, uint64_t> garbage;
  {
    absl::MutexLock lock(&impl_->write_mu);
    garbage = impl_->garbage;
  }
  // Candidates: files whose live bytes (size less garbage) are at most
  // `keep` of their size. The file being appended to qualifies too: it is
  // closed first, so that writers go on in a new one.
  const auto qualifies = [keep](uint64_t size, uint64_t dead) {
    const uint64_t live = size - std::min(size, dead);
    return static_cast<double>(live) <= keep * static_cast<double>(size);
  };
  std::set<uint64_t> candidates;
  std::map<uint64_t, uint64_t> sizes;
  for (const auto& [file, size] : impl_->values->Files()) {
    sizes[file] = size;
    auto g = garbage.find(file);
    if (qualifies(size, g == garbage.end() ? 0 : g->second)) candidates.insert(file);
  }
  std::set<uint64_t> active;
  {
    // Under write_mu: a write that appended to a file not open now has its
    // index entries in by now, so the scan below sees every value of the
    // files it may rewrite (and of those it recounts).
    absl::MutexLock lock(&impl_->write_mu);
    for (uint64_t file : impl_->values->active_files()) {
      if (candidates.count(file) != 0) impl_->values->Rotate(file);
    }
    const std::vector<uint64_t> open = impl_->values->active_files();
    active.insert(open.begin(), open.end());
  }
  for (uint64_t file : active) candidates.erase(file);
  // Garbage entries of files that are gone (a crash after a file's removal):
  // numbered below a file listed, so not created after the listing.
  std::vector<uint64_t> stale;
  for (const auto& [file, bytes] : garbage) {
    if (sizes.count(file) == 0 && active.count(file) == 0 && !sizes.empty() &&
        file < sizes.rbegin()->first) {
      stale.push_back(file);
    }
  }
  if (!stale.empty()) {
    absl::MutexLock lock(&impl_->write_mu);
    if (impl_->failed.ok()) {
      leveldb::WriteBatch wb;
      for (uint64_t file : stale) wb.Delete(ValueGarbageKey(file));
      if (impl_->index->Write(leveldb::WriteOptions(), &wb).ok()) {
        for (uint64_t file : stale) impl_->garbage.erase(file);
      }
    }
  }
  if (candidates.empty()) return absl::OkStatus();
  // Every index entry: the candidates' live values, and every file's live
  // bytes (to correct the counters).
  std::map<uint64_t, std::vector<std::pair<std::string, std::string>>> live;
  std::map<uint64_t, uint64_t> live_bytes;
  {
    leveldb::ReadOptions ro;
    ro.fill_cache = false;
    const std::string prefix = FamilyPrefix(KeyFamily::kValue);
    absl::ReaderMutexLock lock(&impl_->db_mu);
    if (impl_->index == nullptr) return Reopening();
    std::unique_ptr<leveldb::Iterator> it(impl_->index->NewIterator(ro));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      storage::ValueRef ref;
      if (!ref.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) continue;
      live_bytes[ref.file()] += ref.size();
      if (candidates.count(ref.file()) == 0) continue;
      live[ref.file()].emplace_back(it->key().ToString(), it->value().ToString());
    }
    TK_RETURN_IF_ERROR(FromLevelDb(it->status(), "scanning the value index"));
  }
  for (uint64_t file : candidates) {
    // Copied trial by trial, so that the copies of a trial deleted later are
    // runs of whole chunks rather than scattered through the new files.
    std::stable_sort(live[file].begin(), live[file].end(), [](const auto& a, const auto& b) {
      return ValueKeyTrial(a.first) < ValueKeyTrial(b.first);
    });
    TK_RETURN_IF_ERROR(ReclaimFile(file, live[file], stats));
    stats->bytes_freed += sizes[file];
  }
  // Files (closed before the scan) with more garbage than counted: bytes a
  // crash left unreferenced (a reclaim's copies, a write's values whose index
  // write never happened). Counters only grow here: a deletion after the
  // scan counted its own bytes already.
  absl::MutexLock lock(&impl_->write_mu);
  if (!impl_->failed.ok()) return absl::OkStatus();
  leveldb::WriteBatch wb;
  std::map<uint64_t, uint64_t> raised;
  for (const auto& [file, size] : sizes) {
    if (active.count(file) != 0 || candidates.count(file) != 0) continue;
    const uint64_t dead = size - std::min(size, live_bytes[file]);
    const uint64_t counted = impl_->garbage.count(file) ? impl_->garbage[file] : 0;
    if (dead <= counted) continue;
    storage::ValueGarbage g;
    g.set_bytes(dead);
    wb.Put(ValueGarbageKey(file), g.SerializeAsString());
    raised[file] = dead;
    if (qualifies(size, dead)) *recounted = true;
  }
  if (!raised.empty() && impl_->index->Write(leveldb::WriteOptions(), &wb).ok()) {
    for (const auto& [file, dead] : raised) impl_->garbage[file] = dead;
  }
  return absl::OkStatus();
}

absl::Status LevelDbTensorStore::ReclaimFile(
    uint64_t file, const std::vector<std::pair<std::string, std::string>>& live,
    ReclaimStats* stats) {
  constexpr uint64_t kChunkBytes = 16u << 20;
  size_t next = 0;
  while (next < live.size()) {
    // Read a chunk of live values (their checksums checked) without locks.
    std::string bytes;
    struct Moved {
      const std::pair<std::string, std::string>* entry;
      uint64_t offset;
      storage::ValueRef ref;
    };
    std::vector<Moved> moved;
    while (next < live.size() && (moved.empty() || bytes.size() < kChunkBytes)) {
      const auto& entry = live[next++];
      storage::ValueRef ref;
      if (!ref.ParseFromString(entry.second)) continue;
      auto value = impl_->values->Read(ref);
      if (!value.ok()) {
        return absl::Status(value.status().code(),
                            absl::StrCat("rewriting value file ", impl_->values->FileName(file),
                                         ": ", DescribeValueKey(entry.first), ": ",
                                         value.status().message(), " (the file is kept)"));
      }
      moved.push_back(Moved{&entry, bytes.size(), ref});
      bytes.append(*value);
    }
    if (moved.empty()) continue;
    absl::MutexLock lock(&impl_->write_mu);
    if (!impl_->failed.ok()) return impl_->failed;
    TK_ASSIGN_OR_RETURN(ValueLog::Position at, impl_->values->Append(bytes));
    // The copies are durable before any entry points to them.
    TK_RETURN_IF_ERROR(impl_->values->Sync());
    TK_RETURN_IF_ERROR(Fault("gc.copied"));
    leveldb::WriteBatch wb;
    uint64_t old_garbage = impl_->garbage.count(file) ? impl_->garbage[file] : 0;
    uint64_t new_garbage = impl_->garbage.count(at.file) ? impl_->garbage[at.file] : 0;
    std::string encoded;
    for (const Moved& m : moved) {
      old_garbage += m.ref.size();
      // Only where the entry still points to the old copy: a value deleted
      // meanwhile stays deleted (its copy is garbage of the new file).
      std::string now;
      const leveldb::Status got = impl_->index->Get(leveldb::ReadOptions(), m.entry->first, &now);
      if (!got.ok() || now != m.entry->second) {
        new_garbage += m.ref.size();
        continue;
      }
      storage::ValueRef ref = m.ref;
      ref.set_file(at.file);
      ref.set_offset(at.offset + m.offset);
      ref.SerializeToString(&encoded);
      wb.Put(m.entry->first, encoded);
    }
    storage::ValueGarbage g;
    g.set_bytes(old_garbage);
    wb.Put(ValueGarbageKey(file), g.SerializeAsString());
    if (new_garbage > 0) {
      g.set_bytes(new_garbage);
      wb.Put(ValueGarbageKey(at.file), g.SerializeAsString());
    }
    leveldb::WriteOptions wo;
    wo.sync = true;
    const leveldb::Status s = impl_->index->Write(wo, &wb);
    if (!s.ok()) {
      impl_->failed = FromLevelDb(s, "writing to the database");
      impl_->next_reopen = std::chrono::steady_clock::time_point();
      return impl_->failed;
    }
    impl_->garbage[file] = old_garbage;
    if (new_garbage > 0) impl_->garbage[at.file] = new_garbage;
    stats->bytes_copied += bytes.size();
    TK_RETURN_IF_ERROR(Fault("gc.indexed"));
  }
  TK_RETURN_IF_ERROR(Fault("gc.dropping"));
  // Removed before its garbage entry: a crash in between leaves an entry of
  // a missing file (deleted by the next reclaim), never a file without one.
  TK_RETURN_IF_ERROR(impl_->values->Drop(file));
  {
    absl::MutexLock lock(&impl_->write_mu);
    leveldb::WriteBatch wb;
    wb.Delete(ValueGarbageKey(file));
    if (impl_->failed.ok() && impl_->index->Write(leveldb::WriteOptions(), &wb).ok()) {
      impl_->garbage.erase(file);
    }
  }
  ++stats->files_dropped;
  if (!live.empty()) ++stats->files_rewritten;
  return absl::OkStatus();
}

}  // namespace tensorkeep
