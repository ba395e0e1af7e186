#include "hvx/train/data_identity.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "hvx/data/test_util.h"

namespace hvx {
namespace train {
namespace {

std::unique_ptr<data::Dataset> Open(const std::vector<std::string>& files) {
  auto d = data::Dataset::OpenFiles(files, {});
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(*d);
}

TEST(DataIdentityTest, FingerprintIsFnv1a) {
  EXPECT_EQ(Fingerprint(""), 14695981039346656037ull);
  EXPECT_EQ(Fingerprint("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(Fingerprint("ab"), Fingerprint("ba"));
}

// A dataset copied elsewhere keeps its order (a resume after moving the data is allowed) but its
// files are not the same files (ranks that read different copies are told apart).
TEST(DataIdentityTest, MovedDataKeepsItsOrderButNotItsFiles) {
  const std::vector<std::string> here = data::WriteToyShards(data::TempDir("here"), 3, 30);
  const std::string there_dir = data::TempDir("there");
  for (const auto& entry : std::filesystem::directory_iterator(data::TempDir("here"))) {
    std::filesystem::copy_file(entry.path(),
                               std::filesystem::path(there_dir) / entry.path().filename(),
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::vector<std::string> there;
  for (const std::string& f : here) {
    there.push_back(there_dir + "/" + std::filesystem::path(f).filename().string());
  }
  TrainConfig config;
  config.mutable_data()->set_shuffle_seed(7);
  auto a = Open(here), b = Open(there);
  EXPECT_EQ(DataOrder(config, *a), DataOrder(config, *b));
  EXPECT_NE(FilesFingerprint(*a), FilesFingerprint(*b));
  EXPECT_EQ(FilesFingerprint(*a), FilesFingerprint(*Open(here)));
  EXPECT_EQ(FilesFingerprint(*a).rfind("3 files, fingerprint ", 0), 0u) << FilesFingerprint(*a);
  EXPECT_NE(DataOrder(config, *a).find("shuffle_seed 7, remainder "), std::string::npos)
      << DataOrder(config, *a);
}

// Whatever changes the order of an epoch's samples changes DataOrder.
TEST(DataIdentityTest, SeedRemainderSamplesAndSizesChangeTheOrder) {
  auto base = Open(data::WriteToyShards(data::TempDir("base"), 3, 30));
  TrainConfig config;
  const std::string order = DataOrder(config, *base);

  TrainConfig seeded = config;
  seeded.mutable_data()->set_shuffle_seed(config.data().shuffle_seed() + 1);
  EXPECT_NE(DataOrder(seeded, *base), order);

  TrainConfig remainder = config;
  remainder.mutable_data()->set_remainder(config.data().remainder() == PAD ? DROP : PAD);
  EXPECT_NE(DataOrder(remainder, *base), order);

  // More samples in as many files: other sizes, another count.
  EXPECT_NE(DataOrder(config, *Open(data::WriteToyShards(data::TempDir("more"), 3, 31))), order);
  // The same samples split otherwise.
  EXPECT_NE(DataOrder(config, *Open(data::WriteToyShards(data::TempDir("split"), 2, 30))), order);
}

}  // namespace
}  // namespace train
}  // namespace hvx
