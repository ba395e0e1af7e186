#include "hvx/train/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace hvx {
namespace train {
namespace {

// The text is a config file, line numbers and all: kept as written.
// clang-format off
constexpr char kGood[] = R"pb(model { name: "cnn" }
data {
  train_files: "/nonexistent/train-*"
  format: FASHION_MNIST
  batch_size: 32
}
optimizer { lr: 0.01 momentum: 0.9 }
epochs: 2
)pb";
// clang-format on

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigTest, ParseErrorNamesFileLineAndColumn) {
  auto config = ParseTrainConfig("model { name: \"cnn\" }\ndata { batch_sise: 3 }\n", "x.pbtxt");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(
      config.status().message(),
      "x.pbtxt:2:18: Message type \"hvx.train.DataConfig\" has no field named \"batch_sise\".");
}

TEST(ConfigTest, LoadsFillsDefaultsAndResolvesAgainstWorkingDir) {
  const std::string dir = TempDir() + "/wd";
  mkdir(dir.c_str(), 0755);
  WriteFile(dir, "good.pbtxt", kGood);
  auto loaded = LoadTrainConfig("good.pbtxt", {dir, "/nonexistent"}, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, dir + "/good.pbtxt");
  EXPECT_EQ(loaded->config.data().eval_batch_size(), 32);
  EXPECT_EQ(loaded->config.model().num_classes(), 10);
  EXPECT_EQ(loaded->config.launch().num_processes(), "1");
  EXPECT_TRUE(loaded->config.checkpoint().resume());
}

TEST(ConfigTest, FallsBackToBundledDir) {
  const std::string bundled = TempDir() + "/bundled";
  mkdir(bundled.c_str(), 0755);
  WriteFile(bundled, "b.pbtxt", kGood);
  auto path = ResolveConfigPath("b.pbtxt", {TempDir() + "/empty_wd", bundled});
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, bundled + "/b.pbtxt");
  auto missing = ResolveConfigPath("nope.pbtxt", {"/w", "/b"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "config \"nope.pbtxt\" not found; tried /w/nope.pbtxt, /b/nope.pbtxt");
}

TEST(ConfigTest, OverridesMergeInOrder) {
  const std::string path = WriteFile(TempDir(), "o.pbtxt", kGood);
  auto loaded = LoadTrainConfig(path, {},
                                {"data { batch_size: 8 }", "epochs: 5 data { batch_size: 16 }",
                                 "optimizer { step_epochs: 1 } optimizer { step_epochs: 2 }"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.data().batch_size(), 16);
  EXPECT_EQ(loaded->config.epochs(), 5);
  EXPECT_EQ(loaded->config.model().name(), "cnn");  // untouched by overrides
  EXPECT_EQ(loaded->config.optimizer().step_epochs_size(), 2);
}

TEST(ConfigTest, SemanticErrorPointsAtTheTextThatSetTheValue) {
  std::string text = kGood;
  text.replace(text.find("batch_size: 32"), 14, "batch_size: 0");
  const std::string path = WriteFile(TempDir(), "zero.pbtxt", text);
  auto loaded = LoadTrainConfig(path, {}, {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(),
            path + ":5:3: data.batch_size: must be > 0 (samples per rank per step), got 0");

  const std::string good = WriteFile(TempDir(), "good2.pbtxt", kGood);
  loaded = LoadTrainConfig(good, {}, {"epochs: 1", "\n model { name: \"vgg\" }"});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(),
            "--override #2:2:10: model.name: unknown model \"vgg\"; known models: mlp, cnn, "
            "resnet18, resnet50");
}

TEST(ConfigTest, RecipeFieldsAreChecked) {
  const std::string path = WriteFile(TempDir(), "recipe.pbtxt", kGood);
  auto loaded = LoadTrainConfig(path, {}, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.optimizer().backward_passes_per_step(), 1);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"label_smoothing: 1", "--override #1:1:1: label_smoothing: must be in [0, 1), got 1"},
      {"ema_decay: -0.5",
       "--override #1:1:1: ema_decay: must be in [0, 1) (0: no moving average), got -0.5"},
      {"optimizer { clip_grad_norm: -1 }",
       "--override #1:1:13: optimizer.clip_grad_norm: must be >= 0 (0: no clipping)"},
      {"optimizer { backward_passes_per_step: 64 }",
       "--override #1:1:13: optimizer.backward_passes_per_step: is 64, more micro-batches than "
       "the 32 samples of data.batch_size"},
      {"optimizer { kind: LAMB beta2: 1 }",
       "--override #1:1:24: optimizer.beta2: must be in [0, 1)"},
      {"model { torchscript: \"/nonexistent/m.pt\" }",
       "--override #1:1:9: model.torchscript: set model.name (a built-in model) or "
       "model.torchscript, not both"},
      // Text format reads nan and inf; no range check is left to refuse them by chance.
      {"optimizer { warmup_epochs: nan }",
       "--override #1:1:13: optimizer.warmup_epochs: must be a finite number, got nan"},
      {"optimizer { lr: inf }",
       "--override #1:1:13: optimizer.lr: must be a finite number, got inf"},
      {"engine { cycle_time_ms: -inf }",
       "--override #1:1:10: engine.cycle_time_ms: must be a finite number, got -inf"},
      {"data { format: EXAMPLE example { input { key: \"x\" kind: FLOAT_LIST shape: [1] "
       "stddev: [nan] } } }",
       "--override #1:1:79: data.example.input.stddev: must be a finite number, got nan"},
      {"data { gpu_jpeg_decode: true }",
       "--override #1:1:8: data.gpu_jpeg_decode: the data have no JPEG input (format IMAGENET, "
       "or EXAMPLE with a JPEG feature)"},
  };
  // Without a name, the file must be there.
  std::string unnamed = kGood;
  unnamed.replace(unnamed.find("name: \"cnn\""), 11, "torchscript: \"/nonexistent/m.pt\"");
  auto scripted = LoadTrainConfig(WriteFile(TempDir(), "ts.pbtxt", unnamed), {}, {});
  ASSERT_FALSE(scripted.ok());
  EXPECT_NE(scripted.status().message().find(
                "model.torchscript: /nonexistent/m.pt does not exist (save one with "
                "torch.jit.script(model).save(path))"),
            std::string::npos)
      << scripted.status();
  for (const auto& [override_text, message] : bad) {
    auto result = LoadTrainConfig(path, {}, {override_text});
    ASSERT_FALSE(result.ok()) << override_text;
    EXPECT_EQ(result.status().message(), message);
  }
}

TEST(ConfigTest, OverrideSyntaxErrorIsNamed) {
  const std::string path = WriteFile(TempDir(), "s.pbtxt", kGood);
  auto loaded = LoadTrainConfig(path, {}, {"epochs: two"});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(), "--override #1:1:9: Expected integer, got: two");
}

TEST(ConfigTest, MissingFieldsAreReportedWithoutLocation) {
  const std::string path = WriteFile(TempDir(), "m.pbtxt", "model { name: \"mlp\" }\n");
  auto loaded = LoadTrainConfig(path, {}, {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(),
            path + ": data.train_files: no training files given (a glob pattern)");
}

TEST(ConfigTest, SplitFilePatternsSplitsAndTrims) {
  EXPECT_EQ(SplitFilePatterns("~/a/train-*, /b/c-*,"),
            (std::vector<std::string>{"~/a/train-*", "/b/c-*"}));
}

TEST(ConfigTest, RebaseDataFilesKeepsTheNamesInTheGivenFolder) {
  DataConfig d;
  d.set_train_files("/data/imagenet/train-*, /other/extra-*");
  d.set_eval_files("validation-*");
  d.mutable_fashion_mnist_source()->set_output_dir("/h/u/.cache/hvx/fashion_mnist");
  ASSERT_TRUE(RebaseDataFiles("/opt/ml/input/data/training/", &d).ok());
  EXPECT_EQ(d.train_files(),
            "/opt/ml/input/data/training/train-*,/opt/ml/input/data/training/extra-*");
  EXPECT_EQ(d.eval_files(), "/opt/ml/input/data/training/validation-*");
  EXPECT_EQ(d.fashion_mnist_source().output_dir(), "/opt/ml/input/data/training");

  DataConfig no_eval;  // unset stays unset: no eval set appears, no shards are made
  no_eval.set_train_files("/d/train-*");
  ASSERT_TRUE(RebaseDataFiles("/", &no_eval).ok());
  EXPECT_EQ(no_eval.train_files(), "/train-*");
  EXPECT_EQ(no_eval.eval_files(), "");
  EXPECT_FALSE(no_eval.has_fashion_mnist_source());

  DataConfig folder;
  folder.set_train_files("/d/train/");
  EXPECT_EQ(RebaseDataFiles("/x", &folder).message(),
            "--data_dir: data.train_files pattern \"/d/train/\" names a folder, not files");
  EXPECT_EQ(RebaseDataFiles("", &folder).message(), "--data_dir is empty");
}

TEST(ConfigTest, ExpandHomeRules) {
  EXPECT_EQ(*ExpandHome("~", "/h/u"), "/h/u");
  EXPECT_EQ(*ExpandHome("~/x", "/h/u"), "/h/u/x");
  EXPECT_EQ(*ExpandHome("$HOME/x:${HOME}/y", "/h/u"), "/h/u/x:/h/u/y");
  EXPECT_EQ(*ExpandHome("/a/~/b", "/h/u"), "/a/~/b");  // only a leading ~ means home
  EXPECT_EQ(*ExpandHome("~user/x", "/h/u"), "~user/x");
  EXPECT_EQ(*ExpandHome("/plain", ""), "/plain");
  auto no_home = ExpandHome("~/x", "");
  EXPECT_EQ(no_home.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_home.status().message(),
            "\"~/x\" refers to the home directory, but HOME is not set");
}

TEST(ConfigTest, ExpandConfigPathsCoversEveryPath) {
  TrainConfig config;
  config.mutable_data()->set_train_files("~/d/train-*, $HOME/e/train-*");
  config.mutable_data()->set_eval_files("${HOME}/d/test-*");
  config.mutable_data()->mutable_fashion_mnist_source()->set_idx_dir("~/idx");
  config.mutable_data()->mutable_fashion_mnist_source()->set_output_dir("~/d");
  config.mutable_checkpoint()->set_dir("~/.cache/hvx/runs/x/checkpoints");
  config.set_summaries_dir("~/s");
  config.mutable_engine()->set_timeline_path("$HOME/t.json");
  ASSERT_TRUE(ExpandConfigPaths("/h/u", &config).ok());
  EXPECT_EQ(config.data().train_files(), "/h/u/d/train-*,/h/u/e/train-*");
  EXPECT_EQ(config.data().eval_files(), "/h/u/d/test-*");
  EXPECT_EQ(config.data().fashion_mnist_source().idx_dir(), "/h/u/idx");
  EXPECT_EQ(config.data().fashion_mnist_source().output_dir(), "/h/u/d");
  EXPECT_EQ(config.checkpoint().dir(), "/h/u/.cache/hvx/runs/x/checkpoints");
  EXPECT_EQ(config.summaries_dir(), "/h/u/s");
  EXPECT_EQ(config.engine().timeline_path(), "/h/u/t.json");

  TrainConfig unset;
  unset.mutable_checkpoint()->set_dir("~/ck");
  const absl::Status status = ExpandConfigPaths("", &unset);
  EXPECT_EQ(status.message(),
            "checkpoint.dir: \"~/ck\" refers to the home directory, but HOME is not set");
}

// The shipped config keeps its data, checkpoints and summaries under ~/.cache: once loaded, no
// path may still start with "~" (a run once made a directory literally named "~" in its cwd).
TEST(ConfigTest, LoadingTheShippedConfigExpandsHome) {
  auto loaded =
      LoadTrainConfig("fashion_mnist.pbtxt", {"/nonexistent", "data", "/home/tester"}, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const TrainConfig& c = loaded->config;
  EXPECT_EQ(c.data().train_files(), "/home/tester/.cache/hvx/fashion_mnist/train-*");
  EXPECT_EQ(c.data().eval_files(), "/home/tester/.cache/hvx/fashion_mnist/test-*");
  EXPECT_EQ(c.data().fashion_mnist_source().output_dir(), "/home/tester/.cache/hvx/fashion_mnist");
  EXPECT_EQ(c.checkpoint().dir(), "/home/tester/.cache/hvx/runs/fashion_mnist/checkpoints");
  EXPECT_EQ(c.summaries_dir(), "/home/tester/.cache/hvx/runs/fashion_mnist/summaries");

  auto overridden = LoadTrainConfig("fashion_mnist.pbtxt", {"/nonexistent", "data", "/home/tester"},
                                    {"checkpoint { dir: \"~/elsewhere\" }"});
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_EQ(overridden->config.checkpoint().dir(), "/home/tester/elsewhere");

  auto no_home = LoadTrainConfig("fashion_mnist.pbtxt", {"/nonexistent", "data"}, {});
  ASSERT_FALSE(no_home.ok());
  EXPECT_EQ(no_home.status().message(),
            loaded->path +
                ": data.train_files: \"~/.cache/hvx/fashion_mnist/train-*\" refers to the home "
                "directory, but HOME is not set");
}

}  // namespace
}  // namespace train
}  // namespace hvx
