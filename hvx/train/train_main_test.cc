#include "hvx/train/train_main.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hvx {
namespace train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TrainFlagsTest, BothSpellingsOfEveryValueFlag) {
  auto f = ParseTrainFlags({"--config=a.pbtxt", "--override", "epochs: 2", "--override=seed: 1",
                            "--data_dir", "/opt/ml/input/data/training", "--sample_log=/s",
                            "--max_steps", "8", "--export=/m.pt"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->config, "a.pbtxt");
  EXPECT_THAT(f->overrides, ElementsAre("epochs: 2", "seed: 1"));
  EXPECT_EQ(f->data_dir, "/opt/ml/input/data/training");
  EXPECT_EQ(f->sample_log, "/s");
  EXPECT_EQ(f->max_steps, 8);
  EXPECT_EQ(f->export_path, "/m.pt");
  EXPECT_FALSE(f->fresh);
}

// A platform that passes every setting as --name=value (SageMaker's hyperparameters through
// examples/deploy/sagemaker/entry_point.py) can say --fresh=true or --fresh=false.
TEST(TrainFlagsTest, FreshAsASwitchOrAValue) {
  EXPECT_TRUE(ParseTrainFlags({"--config=a", "--fresh"})->fresh);
  EXPECT_TRUE(ParseTrainFlags({"--config=a", "--fresh=true"})->fresh);
  EXPECT_FALSE(ParseTrainFlags({"--config=a", "--fresh=false"})->fresh);
  EXPECT_FALSE(ParseTrainFlags({"--config=a", "--fresh", "--fresh=false"})->fresh);  // the last
  EXPECT_THAT(ParseTrainFlags({"--config=a", "--fresh=yes"}).status().message(),
              HasSubstr("unknown argument \"--fresh=yes\""));
}

TEST(TrainFlagsTest, Errors) {
  EXPECT_THAT(ParseTrainFlags({"--override=x"}).status().message(),
              HasSubstr("--config is required"));
  EXPECT_THAT(ParseTrainFlags({"--config=a", "--data_dir"}).status().message(),
              HasSubstr("--data_dir needs a value"));
  EXPECT_THAT(ParseTrainFlags({"--config=a", "--max_steps=-1"}).status().message(),
              HasSubstr("--max_steps: not a count: \"-1\""));
  EXPECT_THAT(ParseTrainFlags({"--config=a", "--lr=0.1"}).status().message(),
              HasSubstr("unknown argument \"--lr=0.1\""));
}

TEST(TrainMainTest, VersionNeedsNoConfig) {
  auto flags = ParseTrainFlags({"--version"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->version);
}

// Installed as PREFIX/bin/NAME (the images' /opt/hvx/bin/hvx-train), the bundled configs are
// PREFIX/configs; in runfiles, data/ there comes first; elsewhere there are none.
TEST(TrainMainTest, BundledConfigsOfAnInstalledTrainerAreBesideItsBin) {
  const std::string prefix = absl::StrCat(std::getenv("TEST_TMPDIR"), "/opt/hvx");
  ASSERT_EQ(
      system(absl::StrCat("mkdir -p ", prefix, "/bin ", prefix, "/configs ", prefix, "/libexec")
                 .c_str()),
      0);
  const MapEnvironment none;
  EXPECT_EQ(FindBundledConfigDir("hvx-train", none, prefix + "/bin/hvx-train"),
            prefix + "/configs");
  EXPECT_EQ(FindBundledConfigDir("x", none, prefix + "/libexec/hvx-train"), "");
  EXPECT_EQ(FindBundledConfigDir("x", none, "/nonexistent/bin/hvx-train"), "");
  const std::string runfiles = prefix + "/bin/hvx-train.runfiles/hvx/data";
  ASSERT_EQ(
      system(absl::StrCat("mkdir -p ", runfiles, " && touch ", runfiles, "/fashion_mnist.pbtxt")
                 .c_str()),
      0);
  EXPECT_EQ(FindBundledConfigDir("x", none, prefix + "/bin/hvx-train"), runfiles);
}

}  // namespace
}  // namespace train
}  // namespace hvx
