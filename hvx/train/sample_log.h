// --sample_log=DIR: the sample ids each rank trained on, one file per rank and epoch, as the
// audits of partitioning read them (tests/train/epoch_audit.py, lib.sh's audit).
//
//   SampleLog log;
//   HVX_RETURN_IF_ERROR(log.Open(dir, /*rank=*/1, /*epoch=*/0, /*append=*/false));
//   HVX_RETURN_IF_ERROR(log.Add(batch.sample_ids(), batch.num_padded()));  // every step
//   HVX_RETURN_IF_ERROR(log.Close());
//
// "<dir>/rank<R>-epoch<E>.txt" holds one id a line in training order, " pad" after an id that
// fills a PAD remainder's short share (a duplicate, not a sample trained twice).
#ifndef HVX_TRAIN_SAMPLE_LOG_H_
#define HVX_TRAIN_SAMPLE_LOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace hvx {
namespace train {

class SampleLog {
 public:
  SampleLog() = default;
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;
  ~SampleLog() { Reset(); }

  // Opens this rank's file of `epoch` (appended to when the epoch resumes mid-way); nothing when
  // `dir` is empty. Errors name the path.
  absl::Status Open(const std::string& dir, int rank, int64_t epoch, bool append);
  // Written at once, each step: a rank killed mid-epoch (a failed attempt of an elastic job) must
  // leave the steps it trained in its log. The last `num_padded` ids are padding.
  absl::Status Add(const std::vector<int64_t>& ids, int64_t num_padded);
  absl::Status Close();

 private:
  void Reset();
  int fd_ = -1;
  std::string path_;
};

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_SAMPLE_LOG_H_
