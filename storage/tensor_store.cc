#include "storage/tensor_store.h"

#include <algorithm>

#include "base/status_macros.h"

namespace tensorkeep {

namespace {

// Hands out a value read whole.
class WholeBulkReader : public TensorStore::BulkReader {
 public:
  explicit WholeBulkReader(std::string value) : value_(std::move(value)) {}
  uint64_t size() const override { return value_.size(); }
  uint64_t remaining() const override { return value_.size() - done_; }
  absl::Status Read(size_t max_bytes, std::string* out) override {
    const size_t n = std::min<size_t>(max_bytes, value_.size() - done_);
    out->assign(value_, done_, n);
    done_ += n;
    return absl::OkStatus();
  }

 private:
  std::string value_;
  size_t done_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TensorStore::BulkReader>> TensorStore::OpenBulk(
    std::string_view key) {
  TK_ASSIGN_OR_RETURN(auto value, GetBulk(key));
  if (!value.has_value()) return std::unique_ptr<BulkReader>();
  return std::unique_ptr<BulkReader>(new WholeBulkReader(std::move(*value)));
}

}  // namespace tensorkeep
