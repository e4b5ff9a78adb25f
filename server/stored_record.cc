#include "server/stored_record.h"

#include "absl/strings/str_cat.h"

namespace tensorkeep {

std::string EncodeRecordMeta(v1::TensorRecord& record) {
  std::string name, data;
  name.swap(*record.mutable_name());
  data.swap(*record.mutable_data());
  const uint64_t step = record.step();
  record.clear_step();
  std::string meta = record.SerializeAsString();
  record.set_step(step);
  record.mutable_data()->swap(data);
  record.mutable_name()->swap(name);
  return meta;
}

absl::StatusOr<v1::TensorRecord> DecodeRecordMeta(const RecordBlock::Entry& entry, uint64_t step) {
  v1::TensorRecord record;
  if (!record.ParseFromArray(entry.meta.data(), static_cast<int>(entry.meta.size()))) {
    return absl::DataLossError(
        absl::StrCat("corrupt metadata of tensor '", absl::string_view(entry.name.data(), entry.name.size()), "' at step ", step));
  }
  record.set_name(std::string(entry.name));
  record.set_step(step);
  return record;
}

}  // namespace tensorkeep
