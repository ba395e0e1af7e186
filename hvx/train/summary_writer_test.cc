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

}  // namespace
}  // namespace train
}  // namespace hvx
