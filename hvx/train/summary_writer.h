// TensorBoard scalar summaries: an event file of TFRecord-framed Event protos (event.proto).
//
//   HVX_ASSIGN_OR_RETURN(auto writer, SummaryWriter::Create("/runs/fashion"));
//   HVX_RETURN_IF_ERROR(writer->AddScalar("train/loss", 0.42, /*step=*/100));
//
// The file is "<dir>/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>" (n counts the
// process's writers; a name taken is skipped, so no writer writes over another's); its first record
// carries file_version "brain.Event:2" as TensorBoard expects. Records reach the OS at every
// Flush().
#ifndef HVX_TRAIN_SUMMARY_WRITER_H_
#define HVX_TRAIN_SUMMARY_WRITER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/data/record.h"

namespace hvx {
namespace train {

class SummaryWriter {
 public:
  // Creates `dir` (and parents) when missing and opens a new event file in it.
  static absl::StatusOr<std::unique_ptr<SummaryWriter>> Create(const std::string& dir);
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  absl::Status AddScalar(absl::string_view tag, double value, int64_t step);
  absl::Status Flush();
  absl::Status Close();
  const std::string& path() const { return writer_->path(); }

 private:
  explicit SummaryWriter(std::unique_ptr<data::RecordWriter> writer) : writer_(std::move(writer)) {}
  std::unique_ptr<data::RecordWriter> writer_;
};

// One scalar read back from an event file.
struct ScalarEvent {
  std::string tag;
  int64_t step = 0;
  float value = 0;
  double wall_time = 0;
};

// Every scalar in the event file at `path`, in file order (checks framing and CRCs).
absl::StatusOr<std::vector<ScalarEvent>> ReadScalarEvents(const std::string& path);

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_SUMMARY_WRITER_H_
