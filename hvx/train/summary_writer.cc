#include "hvx/train/summary_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "hvx/common/cluster.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/train/event.pb.h"

namespace hvx {
namespace train {
namespace {

double NowSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

}  // namespace

absl::StatusOr<std::unique_ptr<SummaryWriter>> SummaryWriter::Create(const std::string& dir) {
  HVX_RETURN_IF_ERROR(MakeDirs(dir));
  // The pid and a count keep apart the files of writers started in one second (a run resumed at
  // once into its own folder, two writers in one process); a name taken is never written over.
  static std::atomic<int> created{0};
  std::string path;
  struct stat st;
  do {
    path = absl::StrCat(dir, "/events.out.tfevents.", absl::ToUnixSeconds(absl::Now()), ".",
                        HostName("localhost"), ".", getpid(), ".", created++);
  } while (lstat(path.c_str(), &st) == 0);
  HVX_ASSIGN_OR_RETURN(auto records, data::RecordWriter::Open(path, {}));
  std::unique_ptr<SummaryWriter> writer(new SummaryWriter(std::move(records)));
  Event first;
  first.set_wall_time(NowSeconds());
  first.set_file_version("brain.Event:2");
  HVX_RETURN_IF_ERROR(writer->writer_->Write(first.SerializeAsString()));
  HVX_RETURN_IF_ERROR(writer->Flush());
  return writer;
}

absl::Status SummaryWriter::AddScalar(absl::string_view tag, double value, int64_t step) {
  Event event;
  event.set_wall_time(NowSeconds());
  event.set_step(step);
  SummaryValue* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(static_cast<float>(value));
  return writer_->Write(event.SerializeAsString());
}

absl::Status SummaryWriter::Flush() { return writer_->Flush(); }

absl::Status SummaryWriter::Close() { return writer_->Close(); }

absl::StatusOr<std::vector<ScalarEvent>> ReadScalarEvents(const std::string& path) {
  HVX_ASSIGN_OR_RETURN(auto reader, data::RecordReader::Open(path, {}));
  std::vector<ScalarEvent> scalars;
  std::string payload;
  for (;;) {
    absl::Status status = reader->ReadRecord(&payload);
    if (absl::IsOutOfRange(status)) break;
    HVX_RETURN_IF_ERROR(status);
    Event event;
    if (!event.ParseFromString(payload)) {
      return absl::DataLossError(
          absl::StrCat(path, ":", reader->offset(), ": record is not an Event"));
    }
    for (const SummaryValue& v : event.summary().value()) {
      scalars.push_back({v.tag(), event.step(), v.simple_value(), event.wall_time()});
    }
  }
  return scalars;
}

}  // namespace train
}  // namespace hvx
