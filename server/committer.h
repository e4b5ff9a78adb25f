// Committer: the one thread that feeds LevelDB.
//
// Push handlers validate and encode their messages into batches on their own
// threads, then Submit() them here. The committer takes everything queued,
// adds the trial and worker metadata the batches change (it is the only
// owner of that metadata, so read-modify-write needs no lock), writes the
// batches in order — only the last of a group with sync when --sync is on,
// which makes the whole group durable with one fsync — then applies each
// update to its Trial's in-memory index and runs its `done` callback.
//
// Measured on the 2-core reference machine, handlers writing their own
// batches concurrently fall to ~135-165 MB/s at 4 streams; one writer stays
// near LevelDB's sequential speed (docs/storage.md).
//
// Thread safety: Submit() and queued_bytes() are thread-safe. `done`
// callbacks run on the committer thread and must not block.
#ifndef TENSORKEEP_SERVER_COMMITTER_H_
#define TENSORKEEP_SERVER_COMMITTER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/trial.h"
#include "storage/stored.pb.h"
#include "storage/tensor_store.h"

namespace tensorkeep {

struct PendingWrite {
  std::shared_ptr<Trial> trial;               // never null
  std::unique_ptr<TensorStore::Batch> batch;  // null: metadata only
  TrialUpdate update;
  // Called once the write is durable and applied (OK), or failed.
  std::function<void(const absl::Status&)> done;
};

class Committer {
 public:
  // `store` is not owned and must outlive the committer. `trials` and
  // `workers` are the metadata recovered at start-up.
  Committer(TensorStore* store, bool sync, std::map<std::string, storage::TrialMeta> trials,
            std::map<std::pair<std::string, std::string>, storage::WorkerMeta> workers);
  // Drains the queue, then stops the thread.
  ~Committer();

  void Submit(PendingWrite write);
  // Bytes of batches queued and not yet taken for writing (flow control).
  size_t queued_bytes() const;

 private:
  void Run();
  // The metadata puts `write` implies, as two small batches: `before` (the
  // trial's metadata and rule status, which its data's recovery needs) and
  // `after` (the worker's commit, which must not be durable before the data
  // it commits). Kept apart from the data batch so that a 1 MiB batch is not
  // reallocated and copied to append a few bytes. Null when empty.
  void MetadataFor(const PendingWrite& write, std::unique_ptr<TensorStore::Batch>* before,
                   std::unique_ptr<TensorStore::Batch>* after);

  TensorStore* const store_;
  const bool sync_;

  mutable absl::Mutex mu_;
  std::deque<PendingWrite> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Owned by the committer thread only.
  std::map<std::string, storage::TrialMeta> trial_meta_;
  std::map<std::pair<std::string, std::string>, storage::WorkerMeta> worker_meta_;

  std::thread thread_;
};

}  // namespace tensorkeep

#endif  // TENSORKEEP_SERVER_COMMITTER_H_
