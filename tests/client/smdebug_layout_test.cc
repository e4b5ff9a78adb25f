#include "client/cli/smdebug_layout.h"

#include "gtest/gtest.h"

namespace tensorkeep {
namespace cli {
namespace smdebug {
namespace {

// The names below are those of the smdebug fixtures (tests/python/fixtures/smdebug).
TEST(SmdebugLayout, PathsAreSmdebugs) {
  EXPECT_EQ(EventFilePath(12, "worker_0"), "events/000000000012/000000000012_worker_0.tfevents");
  EXPECT_EQ(IndexFilePath(12, "worker_0"), "index/000000000/000000000012_worker_0.json");
  EXPECT_EQ(IndexFilePath(2345, "worker_1"), "index/000000002/000000002345_worker_1.json");
  EXPECT_EQ(CollectionsFilePath("worker_1"), "collections/000000000/worker_1_collections.json");
}

TEST(SmdebugLayout, EventFileNames) {
  auto f = ParseEventFileName("000000000012_worker_0.tfevents");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, 12u);
  EXPECT_EQ(f->worker, "worker_0");
  auto g = ParseEventFileName("000000000003_1234_host_a.tfevents");  // worker names with '_'
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->worker, "1234_host_a");
  for (const char* bad : {"x_worker_0.tfevents", "_worker_0.tfevents", "000000000012_.tfevents",
                          "000000000012_worker_0.json", "12a_worker.tfevents", ""}) {
    EXPECT_FALSE(ParseEventFileName(bad).has_value()) << bad;
  }
}

TEST(SmdebugLayout, ReductionNamesRoundTrip) {
  EXPECT_EQ(ReductionTensorName("gradient/dense.weight", "mean", true),
            "smdebug/reductions/abs_mean/gradient/dense.weight");
  auto r = ParseReductionTensorName("smdebug/reductions/abs_mean/gradient/dense.weight");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->tensor, "gradient/dense.weight");
  EXPECT_EQ(r->reduction, "mean");
  EXPECT_TRUE(r->abs);
  auto m = ParseReductionTensorName("smdebug/reductions/max/x");
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->abs);
  EXPECT_FALSE(ParseReductionTensorName("dense.weight").has_value());
  EXPECT_FALSE(ParseReductionTensorName("smdebug/reductions/max").has_value());
}

TEST(SmdebugLayout, DataTypesMapBothWays) {
  for (int d = v1::FLOAT16; d <= v1::BFLOAT16; ++d) {
    auto tf = ToDataType(static_cast<v1::DType>(d));
    ASSERT_TRUE(tf.has_value()) << d;
    EXPECT_EQ(FromDataType(*tf), static_cast<v1::DType>(d));
  }
  EXPECT_EQ(*ToDataType(v1::FLOAT32), tfevent::DT_FLOAT);  // 1 in TensorFlow's types.proto
  EXPECT_EQ(*ToDataType(v1::INT64), tfevent::DT_INT64);    // 9
  EXPECT_EQ(static_cast<int>(tfevent::DT_HALF), 19);
  EXPECT_EQ(static_cast<int>(tfevent::DT_BFLOAT16), 14);
  EXPECT_FALSE(FromDataType(tfevent::DT_STRING).has_value());
  EXPECT_FALSE(FromDataType(tfevent::DT_UINT16).has_value());
}

}  // namespace
}  // namespace smdebug
}  // namespace cli
}  // namespace tensorkeep
