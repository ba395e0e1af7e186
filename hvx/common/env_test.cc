#include "hvx/common/env.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace hvx {
namespace {

TEST(EnvTest, ProcessEnvironmentReadsRealVariables) {
  setenv("HVX_ENV_TEST_VAR", "42", 1);
  EXPECT_EQ(Environment::Process().Get("HVX_ENV_TEST_VAR"), "42");
  unsetenv("HVX_ENV_TEST_VAR");
  EXPECT_FALSE(Environment::Process().Get("HVX_ENV_TEST_VAR").has_value());
}

TEST(EnvTest, MapEnvironmentAndEmptyValues) {
  MapEnvironment env({{"A", "1"}, {"EMPTY", ""}});
  EXPECT_EQ(env.Get("A"), "1");
  EXPECT_EQ(env.Get("EMPTY"), "");
  EXPECT_FALSE(env.GetNonEmpty("EMPTY").has_value());
  EXPECT_FALSE(env.Get("B").has_value());
}

TEST(EnvTest, ParsersAcceptGoodValues) {
  EXPECT_EQ(*ParseIntKnob("X", " -7 "), -7);
  EXPECT_DOUBLE_EQ(*ParseDoubleKnob("X", "0.5"), 0.5);
  EXPECT_TRUE(*ParseBoolKnob("X", "Yes"));
  EXPECT_FALSE(*ParseBoolKnob("X", "off"));
  EXPECT_EQ(*ParseBytesKnob("X", "134217728"), 134217728);
  EXPECT_EQ(*ParseBytesKnob("X", "128MiB"), 128 << 20);
  EXPECT_EQ(*ParseBytesKnob("X", "64K"), 64 << 10);
  EXPECT_EQ(*ParseBytesKnob("X", "1GiB"), int64_t{1} << 30);
  EXPECT_EQ(*ParseBytesKnob("X", "0"), 0);
}

TEST(EnvTest, ParserErrorsNameVariableAndValue) {
  absl::StatusOr<int64_t> i = ParseIntKnob("HVX_CYCLE_TIME_MS", "fast");
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(i.status().message(), "HVX_CYCLE_TIME_MS='fast': expected an integer");
  EXPECT_EQ(ParseBoolKnob("HVX_X", "maybe").status().message(),
            "HVX_X='maybe': expected one of 1/0, true/false, yes/no, on/off");
  EXPECT_FALSE(ParseBytesKnob("HVX_FUSION_THRESHOLD", "-1").ok());
  EXPECT_FALSE(ParseBytesKnob("HVX_FUSION_THRESHOLD", "12TB").ok());
  EXPECT_FALSE(ParseDoubleKnob("HVX_Y", "nan").ok());
}

struct Options {
  int64_t capacity = 1024;
  int cycle_ms = 1;
  double stall_s = 60;
  bool flag = false;
  std::string path = "default";
  int64_t fusion = 128 << 20;
};

TEST(EnvTest, KnobReaderFillsStructAndKeepsDefaults) {
  MapEnvironment env(
      {{"CAP", "16"}, {"FLAG", "1"}, {"PATH_", "/tmp/t.json"}, {"FUSION", "0"}, {"EMPTY", ""}});
  Options o;
  KnobReader knobs(env);
  knobs.Read("CAP", &o.capacity, 0);
  knobs.Read("EMPTY", &o.cycle_ms, 1);
  knobs.Read("STALL", &o.stall_s, 0.0);
  knobs.Read("FLAG", &o.flag);
  knobs.Read("PATH_", &o.path);
  knobs.ReadBytes("FUSION", &o.fusion);
  ASSERT_TRUE(knobs.status().ok()) << knobs.status();
  EXPECT_EQ(o.capacity, 16);
  EXPECT_EQ(o.cycle_ms, 1);
  EXPECT_EQ(o.stall_s, 60);
  EXPECT_TRUE(o.flag);
  EXPECT_EQ(o.path, "/tmp/t.json");
  EXPECT_EQ(o.fusion, 0);
}

TEST(EnvTest, KnobReaderReportsFirstErrorAndRange) {
  MapEnvironment env({{"CAP", "-3"}, {"CYCLE", "x"}});
  Options o;
  KnobReader knobs(env);
  knobs.Read("CAP", &o.capacity, 0);
  knobs.Read("CYCLE", &o.cycle_ms, 1);
  EXPECT_EQ(knobs.status().message(), "CAP='-3': expected an integer in [0, 9223372036854775807]");
  EXPECT_EQ(o.capacity, 1024);
}

}  // namespace
}  // namespace hvx
