// smdebug's collection files read and written (client/cli/smdebug_collections.h)
// with smdebug 1.0's rules (Collection/SaveConfig/ReductionConfig.from_dict and
// to_json_dict), and Python regexes classified for RE2 (base/python_regex.h).
#include "client/cli/smdebug_collections.h"

#include <gtest/gtest.h>

#include "base/python_regex.h"
#include "google/protobuf/util/json_util.h"

namespace tensorkeep {
namespace cli {
namespace smdebug {
namespace {

const FileCollection& Find(const CollectionsFile& f, const std::string& name) {
  for (const auto& c : f.collections) {
    if (c.config.name() == name) return c;
  }
  ADD_FAILURE() << "no collection " << name;
  static FileCollection none;
  return none;
}

TEST(PythonRegex, ClassifiesWhatRe2RunsWhatOnlyPythonRunsAndWhatNeither) {
  EXPECT_EQ(CheckPythonRegex("^gradient").kind, PythonRegexKind::kRe2);
  EXPECT_EQ(CheckPythonRegex("[Ll]oss_(?!input).*output").kind, PythonRegexKind::kPythonOnly);
  EXPECT_EQ(CheckPythonRegex("(?<=a)b").kind, PythonRegexKind::kPythonOnly);
  EXPECT_EQ(CheckPythonRegex("(a)\\1").kind, PythonRegexKind::kPythonOnly);
  const auto bad = CheckPythonRegex("bias\\Z");  // Python's \Z; RE2 refuses it
  EXPECT_EQ(bad.kind, PythonRegexKind::kInvalid);
  EXPECT_FALSE(bad.error.empty());
  EXPECT_EQ(CheckPythonRegex("(?!x)(").kind, PythonRegexKind::kInvalid);  // broken beyond lookahead
  EXPECT_NE(CompilePythonRegex("weight"), nullptr);
  EXPECT_EQ(CompilePythonRegex("^(?!gradient).*weight"), nullptr);
}

TEST(SmdebugCollections, ReadsSmdebugsFormatWithItsDefaults) {
  const std::string text = R"({"collections": {
    "weights": {"name": "weights", "include_regex": ["^(?!gradient).*weight", "dense", "bias\\Z"],
                "tensor_names": ["b", "a"],
                "reduction_config": {"save_raw_tensor": true, "reductions": "min, abs_mean,l2_norm,abs_l1_norm,max",
                                     "save_shape": true},
                "save_config": {"TRAIN": {"save_interval": 3, "save_steps": [9, 1], "start_step": 2, "end_step": 40},
                                "EVAL": {}, "PREDICT": null, "GLOBAL": {"save_interval": "7", "end_step": null}},
                "save_histogram": false},
    "plain": {"name": "plain", "include_regex": [], "tensor_names": [], "reduction_config": null,
              "save_config": null, "save_histogram": true},
    "bare": {},
    "odd": {"include_regex": ["^x"], "save_config": {"TRAINING": {}}},
    "zero": {"save_config": {"TRAIN": {"save_interval": 0}}},
    "badred": {"reduction_config": {"reductions": "median"}}},
    "_meta": {"num_workers": 3}})";
  auto f = ParseCollectionsFile(text, "w.json");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->num_workers, 3u);
  const FileCollection& w = Find(*f, "weights");
  EXPECT_TRUE(w.configured);
  ASSERT_EQ(w.config.include_regex_size(), 2);  // bias\Z left out, said so
  EXPECT_EQ(w.config.include_regex(0), "^(?!gradient).*weight");
  ASSERT_EQ(w.problems.size(), 1u);
  EXPECT_NE(w.problems[0].find("bias\\Z"), std::string::npos);
  EXPECT_EQ(w.python_only_regexes, 1u);
  EXPECT_EQ(w.matchers.size(), 1u);
  EXPECT_TRUE(w.Contains("dense.weight"));   // "dense" (RE2)
  EXPECT_TRUE(w.Contains("a"));              // by name
  EXPECT_FALSE(w.Contains("conv.weight"));   // only the lookahead regex matches it: Python's job
  ASSERT_EQ(w.config.tensor_names_size(), 2);
  EXPECT_EQ(w.config.tensor_names(0), "a");
  const auto& rc = w.config.reduction_config();
  EXPECT_EQ(std::vector<std::string>(rc.reductions().begin(), rc.reductions().end()),
            (std::vector<std::string>{"min", "max"}));
  EXPECT_EQ(std::vector<std::string>(rc.abs_reductions().begin(), rc.abs_reductions().end()),
            (std::vector<std::string>{"mean"}));
  EXPECT_EQ(std::vector<std::string>(rc.norms().begin(), rc.norms().end()),
            (std::vector<std::string>{"l2"}));
  EXPECT_EQ(std::vector<std::string>(rc.abs_norms().begin(), rc.abs_norms().end()),
            (std::vector<std::string>{"l1"}));
  EXPECT_TRUE(rc.save_raw_tensor() && rc.save_shape());
  ASSERT_EQ(w.config.save_configs_size(), 3);  // PREDICT null: unset
  const auto& train = w.config.save_configs(0);
  EXPECT_EQ(train.mode(), v1::TRAIN);
  EXPECT_EQ(train.save_interval(), 3u);
  EXPECT_EQ(train.start_step(), 2u);
  EXPECT_TRUE(train.has_end_step());
  EXPECT_EQ(train.end_step(), 40u);
  EXPECT_EQ(std::vector<uint64_t>(train.save_steps().begin(), train.save_steps().end()),
            (std::vector<uint64_t>{9, 1}));  // smdebug keeps the order
  const auto& eval = w.config.save_configs(1);  // {}: smdebug's defaults
  EXPECT_EQ(eval.mode(), v1::EVAL);
  EXPECT_EQ(eval.save_interval(), 500u);
  EXPECT_EQ(eval.start_step(), 0u);
  EXPECT_FALSE(eval.has_end_step());
  EXPECT_EQ(w.config.save_configs(2).mode(), v1::GLOBAL);
  EXPECT_EQ(w.config.save_configs(2).save_interval(), 7u);  // int("7")
  EXPECT_FALSE(w.config.save_histogram());

  const FileCollection& plain = Find(*f, "plain");
  EXPECT_TRUE(plain.configured && plain.problems.empty());
  EXPECT_FALSE(plain.config.has_reduction_config());
  EXPECT_EQ(plain.config.save_configs_size(), 0);
  const FileCollection& bare = Find(*f, "bare");
  EXPECT_TRUE(bare.configured);
  EXPECT_TRUE(bare.config.save_histogram());  // smdebug's default
  for (const char* name : {"odd", "zero", "badred"}) {
    const FileCollection& c = Find(*f, name);
    EXPECT_FALSE(c.configured) << name;
    EXPECT_EQ(c.problems.size(), 1u) << name;
  }
  EXPECT_TRUE(Find(*f, "odd").Contains("xy"));  // still tags tensors

  EXPECT_FALSE(ParseCollectionsFile("{", "w.json").ok());
  EXPECT_FALSE(ParseCollectionsFile(R"({"collections": {"a": {"tensor_names": [1]}}})", "w.json").ok());
  EXPECT_EQ(WorkerOfCollectionsFile("worker_0_collections.json"), "worker_0");
  EXPECT_EQ(WorkerOfCollectionsFile("_collections.json"), "");
  EXPECT_EQ(WorkerOfCollectionsFile("worker_0.json"), "");
}

TEST(SmdebugCollections, WritesSmdebugsFormatAndReadsItBack) {
  auto f = ParseCollectionsFile(
      R"({"collections": {"g": {"include_regex": ["^gradient"], "tensor_names": ["x"],
          "reduction_config": {"save_raw_tensor": false, "reductions": "abs_l1_norm,max,l2_norm,abs_mean"},
          "save_config": {"TRAIN": {"save_interval": 2, "save_steps": [5], "start_step": 1, "end_step": 9},
                          "GLOBAL": {"save_interval": 4}}, "save_histogram": false}}})",
      "w.json");
  ASSERT_TRUE(f.ok());
  const v1::CollectionConfig& cfg = f->collections[0].config;
  const auto json = CollectionJson("g", true, cfg, {"x", "gradient/y"});
  std::string text;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(json, &text).ok());
  // smdebug's to_json_dict: reductions in its order, every mode present.
  const auto& fields = json.struct_value().fields();
  EXPECT_EQ(fields.at("reduction_config").struct_value().fields().at("reductions").string_value(),
            "max,l2_norm,abs_mean,abs_l1_norm");
  const auto& sc = fields.at("save_config").struct_value().fields();
  EXPECT_EQ(sc.size(), 4u);
  EXPECT_EQ(sc.at("EVAL").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(sc.at("GLOBAL").struct_value().fields().at("end_step").kind_case(),
            google::protobuf::Value::kNullValue);
  auto again = ParseCollectionsFile(R"({"collections": {"g": )" + text + "}}", "again.json");
  ASSERT_TRUE(again.ok()) << again.status();
  v1::CollectionConfig want = cfg;
  want.clear_tensor_names();
  want.add_tensor_names("gradient/y");
  want.add_tensor_names("x");
  EXPECT_EQ(again->collections[0].config.SerializeAsString(), want.SerializeAsString());

  // Not configured: smdebug's empty collection.
  const auto bare = CollectionJson("h", false, cfg, {"t"});
  const auto& b = bare.struct_value().fields();
  EXPECT_EQ(b.at("include_regex").list_value().values_size(), 0);
  EXPECT_EQ(b.at("save_config").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(b.at("reduction_config").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_TRUE(b.at("save_histogram").bool_value());
}

TEST(SmdebugCollections, ListsTheSavedTensorsItsRegexesDoNotCover) {
  v1::CollectionInfo info;
  info.set_name("weights");
  info.set_configured(true);
  info.mutable_config()->add_include_regex("weight");
  info.mutable_config()->add_include_regex("^(?!gradient).*bias");  // Python-only: covers nothing here
  info.mutable_config()->add_tensor_names("listed");
  for (const char* t : {"dense.weight", "listed", "dense.bias", "tagged"}) info.add_tensor_names(t);
  EXPECT_EQ(ListedTensorNames(info), (std::vector<std::string>{"dense.bias", "listed", "tagged"}));
  info.set_configured(false);
  EXPECT_EQ(ListedTensorNames(info).size(), 4u);
}

}  // namespace
}  // namespace smdebug
}  // namespace cli
}  // namespace tensorkeep
