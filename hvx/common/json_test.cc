#include "hvx/common/json.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(JsonTest, ParsesAndNamesWhereItIsNot) {
  auto v = ParseJson(R"({"a": [1, "x"], "b": {"c": "d\u00e9"}})", "test");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_NE(JsonMember(*v, "b"), nullptr);
  EXPECT_EQ(JsonMember(*JsonMember(*v, "b"), "c")->get<std::string>(), "d\xc3\xa9");
  EXPECT_EQ(JsonMember(*v, "missing"), nullptr);
  EXPECT_EQ(JsonMember((*v)["a"], "a"), nullptr);  // not an object
  const auto bad = ParseJson("{\"a\": [1, 2}", "/opt/ml/input/config/resourceconfig.json");
  EXPECT_THAT(bad.status().message(),
              HasSubstr("/opt/ml/input/config/resourceconfig.json is not JSON (at byte 12)"));
}

// Found by json_fuzz_test: the library throws out_of_range, not parse_error, for these.
TEST(JsonTest, ANumberNoDoubleHoldsIsAnErrorNotAnException) {
  const auto v = ParseJson(R"({"hosts": ["algo-1"], "x": 1e999})", "resourceconfig.json");
  EXPECT_THAT(v.status().message(), HasSubstr("resourceconfig.json holds JSON hvx cannot read"));
  EXPECT_THAT(v.status().message(), HasSubstr("number overflow"));
}

TEST(JsonTest, StringLists) {
  auto v = ParseJson(R"(["a", "b"])", "test");
  ASSERT_TRUE(v.ok());
  auto list = JsonStrings(*v, "SM_HOSTS");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre("a", "b"));
  EXPECT_THAT(JsonStrings(Json::parse(R"(["a", 3])"), "SM_HOSTS").status().message(),
              HasSubstr("SM_HOSTS: expected a JSON list of strings, got item 3"));
  EXPECT_THAT(JsonStrings(Json::parse(R"({"a": 1})"), "SM_HOSTS").status().message(),
              HasSubstr("got {\"a\":1}"));
}

// The three writers this replaced disagreed: one dropped control characters, one did not escape.
TEST(JsonTest, QuotesEverythingAStringCanHold) {
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("line\nnext\x01"), "\"line\\nnext\\u0001\"");
  EXPECT_EQ(JsonQuote("bad \xff byte"), "\"bad \xef\xbf\xbd byte\"");
  // What it writes reads back as the same string.
  const std::string odd = "tab\there \"q\" \x1f end";
  EXPECT_EQ(Json::parse(JsonQuote(odd)).get<std::string>(), odd);
}

}  // namespace
}  // namespace hvx
