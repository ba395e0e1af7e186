#include "hvx/launch/hosts.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HostsTest, ParsesListWithAndWithoutSlots) {
  auto hosts = ParseHostList("h1:2, h2,10.0.0.3:8");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre(HostSpec{"h1", 2}, HostSpec{"h2", std::nullopt},
                                  HostSpec{"10.0.0.3", 8}));
}

TEST(HostsTest, MalformedEntryIsQuoted) {
  for (const char* bad : {"h1:x", "h1:2:3", "h 1", "h1:-2", "h1:"}) {
    auto hosts = ParseHostList(absl::StrCat("ok:1,", bad));
    ASSERT_FALSE(hosts.ok()) << bad;
    EXPECT_THAT(hosts.status().message(), HasSubstr(absl::StrCat("'", bad, "'"))) << bad;
  }
  EXPECT_THAT(ParseHostList("").status().message(), HasSubstr("empty host list"));
}

TEST(HostsTest, ZeroSlotsIsItsOwnError) {
  EXPECT_EQ(ParseHostList("h1:2,h2:0").status().message(),
            "host entry 'h2:0' in -H has zero slots");
}

TEST(HostsTest, DuplicateHostsNamePositions) {
  auto hosts = ParseHostList("a:1,b:1,a:2");
  ASSERT_TRUE(hosts.ok());
  absl::Status s = ValidateHosts(*hosts, "-H");
  EXPECT_THAT(s.message(), HasSubstr("duplicate host 'a' (entries 1 and 3) in -H"));
}

// A name starting with '-' would reach `ssh HOST` as an option (-oProxyCommand=... runs a
// command on this host); every source of host names goes through the same check.
TEST(HostsTest, NamesThatSshWouldReadAsOptionsAreRefused) {
  EXPECT_THAT(ParseHostList("ok,-oProxyCommand=x").status().message(),
              HasSubstr("malformed host entry '-oProxyCommand=x' in -H"));
  EXPECT_THAT(ParseHostfile("a:1\n-v slots=2\n", "/hf").status().message(), HasSubstr("/hf:2"));
  EXPECT_THAT(ValidateHosts({{"a", 1}, {"-v", 1}}, "SM_HOSTS").message(),
              HasSubstr("bad host name '-v' (entry 2) in SM_HOSTS"));
}

TEST(HostsTest, SlotCountsAreBounded) {
  EXPECT_THAT(ParseHostList("h:100000000").status().message(),
              HasSubstr("'h:100000000' in -H has 100000000 slots; a host has at most 4096"));
  // Beyond int: not wrapped to a small or negative count.
  EXPECT_THAT(ParseHostList("h:4294967297").status().message(), HasSubstr("at most 4096"));
  EXPECT_THAT(ParseHostfile("h slots=99999999999999999999\n", "/hf").status().message(),
              HasSubstr("/hf:1"));
  EXPECT_TRUE(ParseHostList("h:4096").ok());
  EXPECT_THAT(ValidateHosts({{"a", 5000}}, "PBS_NODEFILE=/p").message(),
              HasSubstr("host 'a' in PBS_NODEFILE=/p has 5000 slots; give 1 to 4096"));
  std::vector<HostSpec> many;
  for (int i = 0; i < 257; ++i) many.push_back({absl::StrCat("n", i), 4096});
  EXPECT_THAT(ValidateHosts(many, "-H").message(),
              HasSubstr("-H lists 1052672 slots on 257 hosts; a job has at most 1048576"));
  many.pop_back();
  EXPECT_TRUE(ValidateHosts(many, "-H").ok());
}

TEST(HostsTest, HostfileAcceptsAllThreeFormsAndComments) {
  auto hosts = ParseHostfile(
      "# cluster\n"
      "n1 slots=4   # Open MPI form\n"
      "\n"
      "n2:2\n"
      "  n3\n"
      "n4 slots=2 max_slots=8\n",
      "hf");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre(HostSpec{"n1", 4}, HostSpec{"n2", 2},
                                  HostSpec{"n3", std::nullopt}, HostSpec{"n4", 2}));
}

TEST(HostsTest, HostfileErrorsNameFileAndLine) {
  EXPECT_THAT(ParseHostfile("n1 slots=4\nn2 cpus=3\n", "/x/hf").status().message(),
              HasSubstr("/x/hf:2: unknown field 'cpus=3'"));
  EXPECT_THAT(ParseHostfile("n1 slots=0\n", "hf").status().message(), HasSubstr("zero slots"));
  EXPECT_THAT(ParseHostfile("# nothing\n", "hf").status().message(), HasSubstr("lists no hosts"));
}

TEST(HostsTest, ReadHostfileMissingFile) {
  EXPECT_THAT(ReadHostfile("/nonexistent/hf").status().message(),
              HasSubstr("cannot read hostfile /nonexistent/hf"));
}

TEST(HostsTest, FormatHostList) { EXPECT_EQ(FormatHostList({{"a", 2}, {"b", 1}}), "a:2,b:1"); }

}  // namespace
}  // namespace launch
}  // namespace hvx
