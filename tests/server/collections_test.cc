// PutCollections and the collections of ListCollections / GetCollection /
// ListTensorNames(collection=): a writer's collection configuration stored
// on the collector (issue 17), checked against a real in-process server,
// across a restart, and removed with its trial.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/tensorkeep.pb.h"
#include "server/collection_config.h"
#include "storage/stored.pb.h"
#include "tests/server/test_server.h"

namespace tensorkeep {
namespace {

using testing::Float32Record;

v1::CollectionConfig Config(const std::string& name, std::vector<std::string> regexes,
                            uint64_t train_interval = 0) {
  v1::CollectionConfig c;
  c.set_name(name);
  for (auto& r : regexes) c.add_include_regex(r);
  if (train_interval > 0) {
    v1::SaveConfigMode* s = c.add_save_configs();
    s->set_mode(v1::TRAIN);
    s->set_save_interval(train_interval);
    s->set_has_end_step(true);
    s->set_end_step(100);
    s->add_save_steps(3);
  }
  return c;
}

const v1::CollectionInfo* Find(const std::vector<v1::CollectionInfo>& all,
                               const std::string& name) {
  for (const auto& c : all) {
    if (c.name() == name) return &c;
  }
  return nullptr;
}

std::vector<std::string> Names(const v1::CollectionInfo& c) {
  return std::vector<std::string>(c.tensor_names().begin(), c.tensor_names().end());
}

class CollectionsTest : public testing::ServerFixture {};

TEST_F(CollectionsTest, StoredConfigurationIsListedAndSurvivesRestart) {
  // A collection configured before anything is written: the trial appears.
  v1::CollectionConfig weights = Config("weights", {"^(?!gradient).*weight"}, 10);
  v1::CollectionConfig relu = Config("relu_out", {"relu.*_output"});
  relu.mutable_reduction_config()->add_reductions("mean");
  relu.mutable_reduction_config()->add_abs_norms("l2");
  relu.add_tensor_names("named_only");
  v1::CollectionConfig empty = Config("nothing_matches", {"^no_such_tensor$"});
  auto put = TrialOf("run").PutCollections("worker_0", {weights, relu, empty});
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(*put, 3u);

  auto w = OpenWriter("run");
  ASSERT_NE(w, nullptr);
  v1::TensorRecord a = Float32Record("fc1.weight", 0, 4, 1);
  a.add_collections("weights");
  ASSERT_TRUE(w->Write(a).ok());
  ASSERT_TRUE(w->Write(Float32Record("relu1_output_0", 0, 4, 2)).ok());
  ASSERT_TRUE(w->Write(Float32Record("gradient/fc1.weight", 0, 4, 3)).ok());
  ASSERT_TRUE(w->Close(true).ok());

  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "before restart" : "after restart");
    client::Trial t = TrialOf("run");
    auto all = t.CollectionInfos();
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(all->size(), 3u);
    const v1::CollectionInfo* c = Find(*all, "weights");
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->configured());
    ASSERT_EQ(c->config().include_regex_size(), 1);
    EXPECT_EQ(c->config().include_regex(0), "^(?!gradient).*weight");
    ASSERT_EQ(c->config().save_configs_size(), 1);
    EXPECT_EQ(c->config().save_configs(0).mode(), v1::TRAIN);
    EXPECT_EQ(c->config().save_configs(0).save_interval(), 10u);
    EXPECT_EQ(c->config().save_configs(0).end_step(), 100u);
    EXPECT_EQ(c->config().save_configs(0).save_steps(0), 3u);
    EXPECT_EQ(Names(*c), std::vector<std::string>{"fc1.weight"});
    ASSERT_EQ(c->configured_by_size(), 1);
    EXPECT_EQ(c->configured_by(0), "worker_0");
    c = Find(*all, "relu_out");
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->config().has_reduction_config());
    EXPECT_EQ(c->config().reduction_config().reductions(0), "mean");
    EXPECT_EQ(c->config().reduction_config().abs_norms(0), "l2");
    EXPECT_EQ(Names(*c), std::vector<std::string>{"named_only"});
    c = Find(*all, "nothing_matches");
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(Names(*c).empty());

    // tensor_names(collection=): saved names under it, listed by name (if
    // saved), and those an RE2-runnable include_regex finds.
    auto relu_names = t.TensorNames(std::nullopt, 4, {}, "relu_out");
    ASSERT_TRUE(relu_names.ok()) << relu_names.status();
    EXPECT_EQ(*relu_names, std::vector<std::string>{"relu1_output_0"});
    // The lookahead regex is Python's: the collector does not run it.
    auto weight_names = t.TensorNames(std::nullopt, 4, {}, "weights");
    ASSERT_TRUE(weight_names.ok());
    EXPECT_EQ(*weight_names, std::vector<std::string>{"fc1.weight"});
    auto none = t.TensorNames(std::nullopt, 4, {}, "nothing_matches");
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
    if (round == 0) Restart();
  }
}

TEST_F(CollectionsTest, WorkersMergeAndAWorkerReplacesItsOwn) {
  client::Trial t = TrialOf("merge");
  ASSERT_TRUE(t.PutCollections("worker_1", {Config("c", {"b"}, 5), Config("only1", {"x"})}).ok());
  ASSERT_TRUE(t.PutCollections("worker_0", {Config("c", {"a"}, 7)}).ok());
  auto all = t.CollectionInfos();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  const v1::CollectionInfo* c = Find(*all, "c");
  ASSERT_NE(c, nullptr);
  // The lexically first worker's configuration.
  EXPECT_EQ(c->config().include_regex(0), "a");
  EXPECT_EQ(c->config().save_configs(0).save_interval(), 7u);
  ASSERT_EQ(c->configured_by_size(), 2);
  EXPECT_EQ(c->configured_by(0), "worker_0");
  EXPECT_EQ(c->configured_by(1), "worker_1");
  // worker_0 sends again: its new set replaces its old one.
  ASSERT_TRUE(t.PutCollections("worker_0", {Config("c", {"a2"}, 9)}).ok());
  all = t.CollectionInfos();
  ASSERT_TRUE(all.ok());
  c = Find(*all, "c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->config().include_regex(0), "a2");
  EXPECT_EQ(c->config().save_configs(0).save_interval(), 9u);
}

TEST_F(CollectionsTest, RefusesMalformedConfigurations) {
  client::Trial t = TrialOf("bad");
  const auto refused = [&](std::vector<v1::CollectionConfig> cs, const std::string& says) {
    auto r = t.PutCollections("worker_0", cs);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status();
  };
  refused({Config("c", {"(unclosed"})}, "missing )");
  refused({Config("c", {"(?!x"})}, "invalid");  // Python-only, but malformed besides
  refused({Config("c", {std::string(kMaxRegexBytes + 1, 'a')})}, "limit");
  refused({Config("c", std::vector<std::string>(kMaxRegexes + 1, "a"))}, "include_regex");
  refused({Config("c", {"a"}), Config("c", {"b"})}, "twice");
  refused({Config("", {"a"})}, "collection name is empty");
  refused({Config(std::string(kMaxCollectionName + 1, 'n'), {"a"})}, "too long");
  v1::CollectionConfig zero = Config("c", {"a"}, 5);
  zero.mutable_save_configs(0)->set_save_interval(0);
  refused({zero}, "save_interval");
  v1::CollectionConfig red = Config("c", {"a"});
  red.mutable_reduction_config()->add_reductions("median");
  refused({red}, "median");
  std::vector<v1::CollectionConfig> many;
  for (size_t i = 0; i <= kMaxCollections; ++i) many.push_back(Config("c" + std::to_string(i), {}));
  refused(many, "MAX_COLLECTIONS");
  // Nothing of them was stored; a bad worker name is refused too.
  auto bad_worker = t.PutCollections("bad worker", {Config("c", {"a"})});
  EXPECT_EQ(bad_worker.status().code(), absl::StatusCode::kInvalidArgument);
  // Python's lookahead and backreferences are accepted (matched by the
  // Python client).
  ASSERT_TRUE(t.PutCollections("worker_0", {Config("c", {"^(?!gradient).*weight", "(a)\\1",
                                                         "(?<=x)y", "(?P<n>a)(?P=n)"})})
                  .ok());
  auto all = t.CollectionInfos();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].config().include_regex_size(), 4);
}

TEST_F(CollectionsTest, TrialLimitCountsEveryWorker) {
  client::Trial t = TrialOf("limit");
  // Each worker's configuration is within the request limit; together they
  // pass the trial's.
  std::vector<v1::CollectionConfig> big;
  for (int i = 0; i < 40; ++i) {
    big.push_back(Config("c" + std::to_string(i), std::vector<std::string>(60, std::string(400, 'r'))));
  }
  int stored = 0;
  absl::Status last;
  for (int w = 0; w < 8 && last.ok(); ++w) {
    last = t.PutCollections("worker_" + std::to_string(w), big).status();
    if (last.ok()) ++stored;
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_GE(stored, 1);
  EXPECT_LE(stored, 4);
  // A worker may still replace its own with a smaller set.
  EXPECT_TRUE(t.PutCollections("worker_0", {Config("small", {"a"})}).ok());
}

TEST_F(CollectionsTest, EndedTrialRefusesAndDeletionRemovesThem) {
  client::Trial t = TrialOf("gone");
  ASSERT_TRUE(t.PutCollections("worker_0", {Config("c", {"a"})}).ok());
  ASSERT_TRUE(t.End().ok());
  auto after_end = t.PutCollections("worker_0", {Config("c", {"b"})});
  EXPECT_EQ(after_end.status().code(), absl::StatusCode::kFailedPrecondition) << after_end.status();
  auto deleted = t.Delete(true);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  // The name is free: a new trial of it has no collections, before and
  // after a restart (the stored ones went with the deletion).
  ASSERT_TRUE(t.PutCollections("worker_1", {Config("fresh", {"z"})}).ok());
  for (int round = 0; round < 2; ++round) {
    auto all = TrialOf("gone").CollectionInfos();
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(all->size(), 1u);
    EXPECT_EQ((*all)[0].name(), "fresh");
    if (round == 0) Restart();
  }
}

TEST(CollectionConfigTest, StoredAndWireFormsAgree) {
  v1::PutCollectionsRequest r;
  r.set_trial("t");
  r.set_worker("w");
  v1::CollectionConfig* c = r.add_collections();
  *c = Config("c", {"a", "b"}, 3);
  c->add_tensor_names("n");
  c->set_save_histogram(true);
  c->mutable_reduction_config()->add_norms("l1");
  c->mutable_reduction_config()->set_save_raw_tensor(true);
  storage::WorkerCollections stored = ToStored(r);
  ASSERT_EQ(stored.collections_size(), 1);
  EXPECT_EQ(stored.collections(0).include_regex_size(), 2);
  EXPECT_EQ(stored.collections(0).save_configs(0).save_interval(), 3u);
  EXPECT_TRUE(stored.collections(0).reduction_config().save_raw_tensor());
  EXPECT_EQ(stored.collections(0).tensor_names(0), "n");
  EXPECT_TRUE(stored.collections(0).save_histogram());
  EXPECT_EQ(stored.collections(0).reduction_config().norms(0), "l1");
  EXPECT_EQ(stored.collections(0).save_configs(0).mode(), static_cast<int>(v1::TRAIN));
  EXPECT_EQ(ToWire(stored.collections(0)).SerializeAsString(), c->SerializeAsString());
  EXPECT_TRUE(CollectorMatches("relu.*"));
  EXPECT_FALSE(CollectorMatches("^(?!gradient).*weight"));
}

}  // namespace
}  // namespace tensorkeep
