#include "base/collector_list.h"

#include "gtest/gtest.h"

namespace tensorkeep {
namespace {

TEST(CollectorList, ParsesAndTrims) {
  auto list = ParseCollectorList(" a:1, 10.0.0.1:7077 ,[::1]:9,tk-0.tk.ns.svc:7077", "--cluster");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, (std::vector<std::string>{"a:1", "10.0.0.1:7077", "[::1]:9",
                                             "tk-0.tk.ns.svc:7077"}));
}

TEST(CollectorList, RefusesBadItemsNamingThem) {
  for (const char* bad : {"", "a:1,", "a:1,,b:2", "a", "a:0", "a:70000", "a:1x", ":7", "a b:1",
                          "[::1:7", "a:1,a:1"}) {
    auto list = ParseCollectorList(bad, "TENSORKEEP_SERVERS");
    EXPECT_FALSE(list.ok()) << bad;
    EXPECT_NE(list.status().message().find("TENSORKEEP_SERVERS"), std::string::npos) << bad;
  }
  EXPECT_NE(ParseCollectorList("a:1,a:1", "x").status().message().find("twice"),
            std::string::npos);
}

}  // namespace
}  // namespace tensorkeep
