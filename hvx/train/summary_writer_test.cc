#include "hvx/train/summary_writer.h"

#include <dirent.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "hvx/data/record.h"
#include "hvx/train/event.pb.h"

namespace hvx {
namespace train {
namespace {

TEST(SummaryWriterTest, ScalarsReadBackInOrderAfterAFileVersionRecord) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/runs/a";
  auto writer = SummaryWriter::Create(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->path().rfind(dir + "/events.out.tfevents.", 0), 0u) << (*writer)->path();
  ASSERT_TRUE((*writer)->AddScalar("train/loss", 0.5, 10).ok());
  ASSERT_TRUE((*writer)->AddScalar("train/lr", 0.125, 10).ok());
  ASSERT_TRUE((*writer)->AddScalar("eval/accuracy", 0.91, 20).ok());
  ASSERT_TRUE((*writer)->Close().ok());

  auto scalars = ReadScalarEvents((*writer)->path());
  ASSERT_TRUE(scalars.ok()) << scalars.status();
  ASSERT_EQ(scalars->size(), 3u);
  EXPECT_EQ((*scalars)[0].tag, "train/loss");
  EXPECT_EQ((*scalars)[0].step, 10);
  EXPECT_FLOAT_EQ((*scalars)[0].value, 0.5f);
  EXPECT_EQ((*scalars)[2].tag, "eval/accuracy");
  EXPECT_EQ((*scalars)[2].step, 20);
  EXPECT_FLOAT_EQ((*scalars)[2].value, 0.91f);
  EXPECT_GT((*scalars)[2].wall_time, 1.6e9);

  // The first record is the version marker TensorBoard looks for; check its wire bytes too.
  auto reader = data::RecordReader::Open((*writer)->path(), {});
  ASSERT_TRUE(reader.ok());
  std::string payload;
  ASSERT_TRUE((*reader)->ReadRecord(&payload).ok());
  Event first;
  ASSERT_TRUE(first.ParseFromString(payload));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  // Field 3 (file_version), wire type 2: tag byte 0x1a, as in TensorFlow's event.proto.
  EXPECT_NE(payload.find(std::string("\x1a\x0d"
                                     "brain.Event:2")),
            std::string::npos);
}

TEST(SummaryWriterTest, UnwritableDirectoryIsAnError) {
  auto writer = SummaryWriter::Create("/proc/no/such/dir");
  EXPECT_FALSE(writer.ok());
}

// A run resumed at once into its own folder opens a second writer within the same second: it gets
// a file of its own, and the first file's events are kept.
TEST(SummaryWriterTest, WritersStartedInOneSecondWriteFilesOfTheirOwn) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/runs/same_second";
  auto first = SummaryWriter::Create(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->AddScalar("train/loss", 0.5, 1).ok());
  ASSERT_TRUE((*first)->Close().ok());
  auto second = SummaryWriter::Create(dir);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)->AddScalar("train/loss", 0.25, 2).ok());
  ASSERT_TRUE((*second)->Close().ok());
  EXPECT_NE((*first)->path(), (*second)->path());
  auto kept = ReadScalarEvents((*first)->path());
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ((*kept)[0].step, 1);
}

}  // namespace
}  // namespace train
}  // namespace hvx
