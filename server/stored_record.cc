#include "server/stored_record.h"

#include "absl/strings/str_cat.h"
#include "storage/stored.pb.h"

namespace tensorkeep {

std::string EncodeRecordMeta(const v1::TensorRecord& record) {
  storage::RecordMeta meta;
  meta.set_mode(record.mode());
  meta.set_mode_step(record.mode_step());
  meta.set_dtype(record.dtype());
  meta.mutable_shape()->CopyFrom(record.shape());
  meta.set_value_size(record.value_size());
  meta.set_has_value(record.has_value());
  meta.mutable_reductions()->Reserve(record.reductions_size());
  for (const v1::Reduction& r : record.reductions()) {
    storage::StoredReduction* stored = meta.add_reductions();
    stored->set_name(r.name());
    stored->set_abs(r.abs());
    stored->set_value(r.value());
  }
  meta.mutable_collections()->CopyFrom(record.collections());
  return meta.SerializeAsString();
}

absl::StatusOr<v1::TensorRecord> DecodeRecordMeta(const RecordBlock::Entry& entry, uint64_t step) {
  storage::RecordMeta meta;
  if (!meta.ParseFromArray(entry.meta.data(), static_cast<int>(entry.meta.size()))) {
    return absl::DataLossError(absl::StrCat(
        "corrupt metadata of tensor '", absl::string_view(entry.name.data(), entry.name.size()),
        "' at step ", step));
  }
  v1::TensorRecord record;
  record.set_name(std::string(entry.name));
  record.set_step(step);
  // Stored values were valid when written; an unknown number read back (a
  // damaged entry) is caught where the record is used, as before.
  record.set_mode(static_cast<v1::Mode>(meta.mode()));
  record.set_mode_step(meta.mode_step());
  record.set_dtype(static_cast<v1::DType>(meta.dtype()));
  record.mutable_shape()->Swap(meta.mutable_shape());
  record.set_value_size(meta.value_size());
  record.set_has_value(meta.has_value());
  record.mutable_reductions()->Reserve(meta.reductions_size());
  for (storage::StoredReduction& stored : *meta.mutable_reductions()) {
    v1::Reduction* r = record.add_reductions();
    r->mutable_name()->swap(*stored.mutable_name());
    r->set_abs(stored.abs());
    r->set_value(stored.value());
  }
  record.mutable_collections()->Swap(meta.mutable_collections());
  return record;
}

}  // namespace tensorkeep
