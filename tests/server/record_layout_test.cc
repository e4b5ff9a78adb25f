// The stored layout of records (server/stored_record.h): many small records
// of one step packed into several record blocks, large values beside them,
// several workers at one step, a step rewritten before it was committed (the
// newest write wins) — every value read back exactly, before and after a
// restart that rebuilds the index from the blocks.
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "server/stored_record.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;

class RecordLayoutTest : public testing::ServerFixture {
 protected:
  // What each (worker, step, name) must read back as.
  using Expected = std::map<std::tuple<std::string, uint64_t, std::string>, std::string>;

  void CheckAll(const Expected& expected) {
    auto trial = TrialOf("layout");
    for (const auto& [key, data] : expected) {
      const auto& [worker, step, name] = key;
      auto v = trial.tensor(name).GetValue(step, client::kGlobal, worker);
      ASSERT_TRUE(v.ok()) << name << " step " << step << " " << worker << ": " << v.status();
      EXPECT_EQ(v->data, data) << name << " step " << step << " " << worker;
      EXPECT_EQ(v->worker, worker);
    }
    auto names = trial.TensorNames();
    ASSERT_TRUE(names.ok()) << names.status();
    std::set<std::string> want;
    for (const auto& [key, data] : expected) want.insert(std::get<2>(key));
    EXPECT_EQ(std::set<std::string>(names->begin(), names->end()), want);
  }
};

TEST_F(RecordLayoutTest, BlocksInlineAndLargeValuesAcrossWorkersRewritesAndRestart) {
  Expected expected;
  // Records small enough to be inline, around the threshold, and large; the
  // scalars alone fill several blocks per step.
  const int kScalars = 1500;
  static_assert(kScalars * 12 > 2 * kBlockTargetBytes, "several blocks per step");
  const int kInlineMax = static_cast<int>(kMaxInlineValueBytes / sizeof(float));
  for (const std::string worker : {"worker_0", "worker_1"}) {
    auto w = OpenWriter("layout", worker, 2);
    ASSERT_NE(w, nullptr);
    for (uint64_t step = 0; step < 3; ++step) {
      uint32_t seed = static_cast<uint32_t>(step * 100000 + (worker == "worker_1" ? 50000 : 0));
      // Written in descending name order: the collector sorts.
      for (int i = kScalars - 1; i >= 0; --i) {
        auto r = Float32Record("scalar/" + std::to_string(i), step, 1, seed++, 1, step);
        expected[{worker, step, r.name()}] = r.data();
        ASSERT_TRUE(w->Write(std::move(r)).ok());
      }
      for (int n : {kInlineMax - 1, kInlineMax, kInlineMax + 1, 16384, 300000}) {
        auto r = Float32Record("sized/" + std::to_string(n), step, n, seed++, 1, step);
        expected[{worker, step, r.name()}] = r.data();
        ASSERT_TRUE(w->Write(std::move(r)).ok());
      }
      if (step == 2) {
        // Rewrites of the step not yet committed, in a later message: the
        // newest value wins for small and large records alike.
        ASSERT_TRUE(w->Flush().ok());
        for (const std::string name : {"scalar/7", "scalar/1499", "sized/16384"}) {
          const int n = name == "sized/16384" ? 16384 : 1;
          auto r = Float32Record(name, step, n, seed++, 1, step);
          expected[{worker, step, name}] = r.data();
          ASSERT_TRUE(w->Write(std::move(r)).ok());
        }
      }
      ASSERT_TRUE(w->EndStep(step).ok());
    }
    ASSERT_TRUE(w->Flush().ok());
    ASSERT_TRUE(w->Close(/*end_of_training=*/true).ok());
  }
  CheckAll(expected);
  Restart();
  CheckAll(expected);
}

TEST_F(RecordLayoutTest, IdenticalResendOfACommittedStepIsAcceptedAcrossBlocks) {
  Expected expected;
  std::vector<v1::TensorRecord> step0;
  for (int i = 0; i < 1200; ++i) {
    step0.push_back(Float32Record("s" + std::to_string(i), 0, i % 3 == 0 ? 600 : 1,
                                  static_cast<uint32_t>(i), 1, 0));
    expected[{"worker_0", 0, step0.back().name()}] = step0.back().data();
  }
  {
    auto w = OpenWriter("layout");
    for (const auto& r : step0) ASSERT_TRUE(w->Write(r).ok());
    ASSERT_TRUE(w->EndStep(0).ok());
    ASSERT_TRUE(w->Flush().ok());
    ASSERT_TRUE(w->Close(false).ok());
  }
  Restart();
  {
    // A writer that reconnects and resends the whole committed step.
    auto w = OpenWriter("layout");
    for (const auto& r : step0) ASSERT_TRUE(w->Write(r).ok());
    ASSERT_TRUE(w->Flush().ok()) << "an identical resend must be accepted";
    // A changed value of the committed step is refused.
    auto changed = step0[5];
    changed.mutable_data()->at(0) ^= 1;
    ASSERT_TRUE(w->Write(changed).ok());
    auto s = w->Flush();
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  }
  CheckAll(expected);
}

TEST_F(RecordLayoutTest, AReductionNeverSeesAValueThatWasRewrittenSince) {
  // Reductions keep large values of committed steps (server/value_cache.h);
  // a step not yet committed may still be rewritten, and the next reduction
  // must see the new value.
  auto w = OpenWriter("layout");
  const int n = 300000;  // 1.2 MB: stored outside its block
  auto first = Float32Record("big", 0, n, 1, 1, 0);
  auto second = Float32Record("big", 0, n, 2, 1, 0);
  const auto mean_of = [](const v1::TensorRecord& r) {
    long double sum = 0;
    for (float f : testing::AsFloats(r.data())) sum += f;
    return static_cast<double>(sum / (r.data().size() / sizeof(float)));
  };
  auto t = TrialOf("layout");
  const auto reduce = [&]() -> double {
    auto v = t.tensor("big").ReductionValue(0, "mean", client::kTrain);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : NAN;
  };
  ASSERT_TRUE(w->Write(first).ok());
  ASSERT_TRUE(w->Flush().ok());
  // A step still being written can be read; what is read then must not be
  // kept, since the writer may still replace it.
  EXPECT_NEAR(reduce(), mean_of(first), 1e-9);
  EXPECT_NEAR(reduce(), mean_of(first), 1e-9);
  ASSERT_TRUE(w->Write(second).ok());
  ASSERT_TRUE(w->EndStep(0).ok());
  ASSERT_TRUE(w->Flush().ok());
  EXPECT_NEAR(reduce(), mean_of(second), 1e-9);
  EXPECT_NEAR(reduce(), mean_of(second), 1e-9) << "the second read comes from the cache";
  // After a restart (empty cache) the same.
  ASSERT_TRUE(w->Close(true).ok());
  Restart();
  t = TrialOf("layout");
  EXPECT_NEAR(reduce(), mean_of(second), 1e-9);
}

// The stored schema (storage::RecordMeta) reads what storage format 7 wrote
// before it existed, the wire's TensorRecord serialized without name, step and
// data, and writes the same bytes: data directories stay readable both ways.
TEST(StoredRecordTest, RecordMetaReadsAndWritesTheBytesFormat7Stored) {
  v1::TensorRecord full;
  full.set_name("layer.weight");
  full.set_step(41);
  full.set_mode(v1::EVAL);
  full.set_mode_step(7);
  full.set_dtype(v1::BFLOAT16);
  full.add_shape(3);
  full.add_shape(0);
  full.add_shape(-1);  // never stored, but the encoding of a negative must match too
  full.set_data("xx");
  full.set_value_size(123456);
  full.set_has_value(true);
  for (const auto& [name, abs, value] :
       std::vector<std::tuple<std::string, bool, double>>{{"mean", false, -0.5}, {"l2", true, 3e300}}) {
    v1::Reduction* r = full.add_reductions();
    r->set_name(name);
    r->set_abs(abs);
    r->set_value(value);
  }
  full.add_collections("weights");
  full.add_collections("default");

  v1::TensorRecord old_meta = full;  // what format 7 serialized
  old_meta.clear_name();
  old_meta.clear_step();
  old_meta.clear_data();
  const std::string old_bytes = old_meta.SerializeAsString();
  EXPECT_EQ(EncodeRecordMeta(full), old_bytes);

  RecordBlock::Entry entry;
  entry.name = full.name();
  entry.meta = old_bytes;
  auto decoded = DecodeRecordMeta(entry, 41);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  v1::TensorRecord want = full;
  want.clear_data();
  EXPECT_EQ(decoded->SerializeAsString(), want.SerializeAsString());

  const std::string garbage("\xff\xff\xff", 3);
  entry.meta = garbage;
  EXPECT_EQ(DecodeRecordMeta(entry, 41).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tensorkeep
