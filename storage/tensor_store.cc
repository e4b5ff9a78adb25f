#include "storage/tensor_store.h"

#include <algorithm>

#include "base/status_macros.h"

namespace tensorkeep {

namespace {

// Hands out a value held in memory.
class WholeBulkReader : public TensorStore::BulkReader {
 public:
  explicit WholeBulkReader(std::shared_ptr<const std::string> bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_->size(); }
  uint64_t remaining() const override { return bytes_->size() - done_; }
  absl::Status Read(size_t max_bytes, std::string* out) override {
    const size_t n = std::min<size_t>(max_bytes, bytes_->size() - done_);
    out->assign(*bytes_, done_, n);
    done_ += n;
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const std::string> bytes_;
  size_t done_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TensorStore::BulkReader>> TensorStore::OpenBulk(
    std::string_view key) {
  TK_ASSIGN_OR_RETURN(auto value, GetBulk(key));
  if (!value.has_value()) return std::unique_ptr<BulkReader>();
  return ReaderOf(std::make_shared<const std::string>(std::move(*value)));
}

std::unique_ptr<TensorStore::BulkReader> TensorStore::ReaderOf(
    std::shared_ptr<const std::string> bytes) {
  return std::make_unique<WholeBulkReader>(std::move(bytes));
}

}  // namespace tensorkeep
