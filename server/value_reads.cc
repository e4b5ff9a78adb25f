// Collector's reads of saved records and values: a record's block from the
// index, its bytes inline, from the value cache or from the store (whole or
// piece by piece).
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/errors.h"
#include "base/status_macros.h"
#include "server/collector.h"
#include "server/stored_record.h"
#include "server/validation.h"
#include "spdlog/spdlog.h"
#include "storage/keys.h"
#include "storage/record_block.h"
#include "tensor/dtype.h"
#include "tensor/histogram.h"
#include "tensor/reductions.h"

namespace tensorkeep {

namespace {

absl::Status ReductionsOnly(const std::string& tensor, uint64_t step) {
  return MakeError(Reason::kTensorUnavailableForStep,
                   absl::StrCat("tensor '", tensor, "' at step ", step,
                                " was saved as reductions only (no raw value)"));
}

}  // namespace

absl::StatusOr<std::optional<Collector::Value>> Collector::FindRecord(
    const Trial& trial, uint64_t step, const std::string& worker, const std::string& tensor) const {
  for (uint64_t id : trial.BlocksFor(step, worker, tensor)) {
    TK_ASSIGN_OR_RETURN(auto bytes, store_->Get(BlockKey(trial.name(), step, worker, id)));
    if (!bytes.has_value()) {
      return absl::InternalError(
          absl::StrCat("record block ", id, " of step ", step, " is missing from the store"));
    }
    TK_ASSIGN_OR_RETURN(RecordBlock block, RecordBlock::Parse(*bytes));
    auto entry = block.Find(tensor);
    if (!entry.has_value()) continue;
    Value out;
    out.block_id = id;
    out.where.global_step = step;
    out.where.worker = worker;
    TK_ASSIGN_OR_RETURN(out.meta, DecodeRecordMeta(*entry, step));
    out.where.info = StepInfo{out.meta.mode(), out.meta.mode_step()};
    if (StoresInline(out.meta)) {
      out.data.assign(entry->data.data(), entry->data.size());
      out.data_loaded = out.meta.has_value();
    }
    return out;
  }
  return std::nullopt;
}

absl::StatusOr<Collector::Value> Collector::ReadRecord(const Trial& trial,
                                                       const std::string& tensor,
                                                       const Trial::Located& where) const {
  TK_ASSIGN_OR_RETURN(auto found, FindRecord(trial, where.global_step, where.worker, tensor));
  if (!found.has_value()) {
    return absl::InternalError(absl::StrCat("tensor '", tensor, "' at step ", where.global_step,
                                            " is indexed but missing from the store"));
  }
  found->where = where;
  return std::move(*found);
}

namespace {

std::string LargeValueKey(const Trial& trial, const Collector::Value& value) {
  return ValueKey(trial.name(), value.where.global_step, value.where.worker, value.block_id,
                  value.meta.name());
}

absl::Status CheckSize(const Collector::Value& value, size_t size) {
  if (size == value.meta.value_size()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("value of tensor '", value.meta.name(), "' at step ",
                                          value.where.global_step, " is truncated: ", size, " of ",
                                          value.meta.value_size(), " bytes"));
}

}  // namespace

absl::StatusOr<std::string> Collector::ReadLargeValue(const Value& value,
                                                      const std::string& key) const {
  auto data = store_->GetBulk(key);
  if (!data.ok()) {
    // The store names the file and offset; say which tensor it was.
    return absl::Status(data.status().code(),
                        absl::StrCat("reading tensor '", value.meta.name(), "' at step ",
                                     value.where.global_step, ": ", data.status().message()));
  }
  if (!data->has_value()) {
    return absl::DataLossError(absl::StrCat("value of tensor '", value.meta.name(), "' at step ",
                                            value.where.global_step, " is missing"));
  }
  TK_RETURN_IF_ERROR(CheckSize(value, (*data)->size()));
  return std::move(**data);
}

absl::Status Collector::LoadValue(const Trial& trial, Value* value) const {
  if (!value->meta.has_value()) {
    return ReductionsOnly(value->meta.name(), value->where.global_step);
  }
  if (value->data_loaded) return CheckSize(*value, value->data.size());
  const std::string key = LargeValueKey(trial, *value);
  if (auto cached = value_cache_.Lookup(key)) {
    value->data = *cached;  // checked when it was kept
  } else {
    TK_ASSIGN_OR_RETURN(value->data, ReadLargeValue(*value, key));
  }
  value->data_loaded = true;
  return absl::OkStatus();
}

absl::Status Collector::WithValue(
    const Trial& trial, const Value& value,
    const std::function<absl::Status(absl::Span<const char>)>& fn) const {
  if (!value.meta.has_value()) return ReductionsOnly(value.meta.name(), value.where.global_step);
  if (value.data_loaded) {
    TK_RETURN_IF_ERROR(CheckSize(value, value.data.size()));
    return fn(absl::Span<const char>(value.data.data(), value.data.size()));
  }
  const std::string key = LargeValueKey(trial, value);
  std::shared_ptr<const std::string> bytes = value_cache_.Lookup(key);
  if (bytes == nullptr) {
    TK_ASSIGN_OR_RETURN(std::string data, ReadLargeValue(value, key));
    bytes = std::make_shared<const std::string>(std::move(data));
    value_cache_.Insert(key, bytes);
  }
  return fn(absl::Span<const char>(bytes->data(), bytes->size()));
}

absl::StatusOr<std::unique_ptr<TensorStore::BulkReader>> Collector::OpenValue(
    const Trial& trial, const Value& value) const {
  if (!value.meta.has_value()) return ReductionsOnly(value.meta.name(), value.where.global_step);
  const std::string key = LargeValueKey(trial, value);
  std::unique_ptr<TensorStore::BulkReader> reader;
  if (auto cached = value_cache_.Lookup(key)) {
    reader = TensorStore::ReaderOf(std::move(cached));
  } else {
    auto opened = store_->OpenBulk(key);
    if (!opened.ok()) {
      return absl::Status(opened.status().code(),
                          absl::StrCat("reading tensor '", value.meta.name(), "' at step ",
                                       value.where.global_step, ": ", opened.status().message()));
    }
    if (*opened == nullptr) {
      return absl::DataLossError(absl::StrCat("value of tensor '", value.meta.name(), "' at step ",
                                              value.where.global_step, " is missing"));
    }
    reader = *std::move(opened);
  }
  TK_RETURN_IF_ERROR(CheckSize(value, reader->size()));
  return reader;
}

absl::StatusOr<Collector::Value> Collector::ReadValue(const Trial& trial, const std::string& tensor,
                                                      const Trial::Located& where) const {
  TK_ASSIGN_OR_RETURN(Value value, ReadRecord(trial, tensor, where));
  TK_RETURN_IF_ERROR(LoadValue(trial, &value));
  return value;
}

}  // namespace tensorkeep
