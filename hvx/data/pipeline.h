// One rank's input pipeline for one epoch: reader threads -> decode threads -> batcher -> a
// bounded window of prefetched batches.
//
// clang-format off
//   HVX_ASSIGN_OR_RETURN(auto pipeline, Pipeline::Create(dataset, options));
//   while (true) {
//     auto batch = pipeline->Next();
//     if (absl::IsOutOfRange(batch.status())) break;
//     ...
//   }
// clang-format on
//
// What a rank reads is MakeShardPlan(dataset->num_samples(), rank, size, epoch, seed, remainder,
// consumed); batch b holds plan entries [b * batch_size, (b + 1) * batch_size) in that order, so
// batches (ids and bytes) are identical whatever the thread counts or timing. Every rank gets the
// same number of batches. An error in any stage (I/O, corruption, decoding) stops the pipeline
// and is returned by Next() with the file, offset and sample id. Destroying the pipeline stops and
// joins its threads, also in the middle of an epoch.
#ifndef HVX_DATA_PIPELINE_H_
#define HVX_DATA_PIPELINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/common/types.h"
#include "hvx/data/dataset.h"
#include "hvx/data/decoder.h"
#include "hvx/data/shard_plan.h"

namespace hvx {
namespace data {

struct PipelineOptions {
  // Which samples this rank reads, in which order (shard_plan.h): rank, size, epoch, seed,
  // remainder, shuffle and the resume position `consumed` (samples of this epoch already consumed,
  // summed over all ranks; for the same world size: batches_done * batch_size * size).
  // num_samples is the dataset's, whatever is set here.
  ShardPlanOptions plan;
  int64_t batch_size = 32;
  // A last batch smaller than batch_size is dropped instead of returned (same on every rank).
  bool drop_last_batch = false;
  // > 0: the epoch ends after this many batches, and nothing past them is read or decoded (the
  // same on every rank, since every rank has the same number of batches). 0: every batch.
  int64_t max_batches = 0;
  int reader_threads = 1;
  int decode_threads = 2;
  // Batches that may be read and decoded ahead of the consumer.
  int prefetch_batches = 4;
  // Samples a reader hands to a decoder at once (never across batches). Handing over samples one
  // by one costs a thread wake-up each, more than decoding a small image.
  int samples_per_task = 16;
  bool verify_crc = true;
  // Required. Shared, because several pipelines (epochs, train and eval) may use one decoder.
  std::shared_ptr<const Decoder> decoder;
};

// A batch owns its memory; the caller may keep it as long as it likes (e.g. wrap `data()` in a
// framework tensor whose deleter releases the Batch).
class BatchBufferPool;

class Batch {
 public:
  // Allocates its own memory.
  Batch(int64_t index, DataType dtype, TensorShape shape);
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // Position of this batch in the rank's epoch, counted from the resume point.
  int64_t index() const { return index_; }
  int64_t size() const { return shape_.dim(0); }
  DataType dtype() const { return dtype_; }
  // [size] + the decoder's sample shape, e.g. [32, 1, 28, 28] or [32, 3, 224, 224].
  const TensorShape& shape() const { return shape_; }
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  size_t num_bytes() const { return num_bytes_; }
  TensorRef images() { return TensorRef(dtype_, shape_, data_.get()); }
  const std::vector<int64_t>& labels() const { return labels_; }
  // Global sample ids, for the sample audit (which sample each row came from).
  const std::vector<int64_t>& sample_ids() const { return sample_ids_; }
  // The last num_padded rows are padding duplicates (RemainderPolicy::kPad).
  int64_t num_padded() const { return num_padded_; }

 private:
  friend class Pipeline;
  // Returns the memory to `pool` when the batch is destroyed (or frees it if pool is null).
  struct Release {
    std::shared_ptr<BatchBufferPool> pool;
    void operator()(uint8_t* p) const;
  };
  Batch(int64_t index, DataType dtype, TensorShape shape, std::shared_ptr<BatchBufferPool> pool);
  int64_t index_;
  DataType dtype_;
  TensorShape shape_;
  size_t num_bytes_;
  std::unique_ptr<uint8_t, Release> data_;
  std::vector<int64_t> labels_;
  std::vector<int64_t> sample_ids_;
  int64_t num_padded_ = 0;
  int64_t filled_ = 0;
};

struct PipelineStats {
  int64_t samples = 0;         // decoded so far
  int64_t batches = 0;         // handed to the consumer
  int64_t bytes_read = 0;      // record payload bytes
  double consumer_wait_s = 0;  // time Next() spent waiting for a batch
  double read_busy_s = 0;      // summed over reader threads
  double decode_busy_s = 0;    // summed over decode threads
  double elapsed_s = 0;        // since Create()
};

class Pipeline {
 public:
  // `dataset` is shared: open it once and make one pipeline per epoch.
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(std::shared_ptr<const Dataset> dataset,
                                                          const PipelineOptions& options);
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  ~Pipeline();

  // The next batch; OutOfRange after the last one; any other error ends the pipeline.
  absl::StatusOr<std::unique_ptr<Batch>> Next();

  int64_t num_batches() const { return num_batches_; }
  // Samples this rank reads this epoch (from the resume point), including padding.
  int64_t num_samples() const { return static_cast<int64_t>(plan_.sample_ids.size()); }
  const ShardPlan& plan() const { return plan_; }
  PipelineStats stats() const;

 private:
  // Consecutive plan positions [first, first + records.size()) of one batch.
  struct Task {
    int64_t first = 0;
    std::vector<absl::string_view> records;  // into the mapped files or into `framed`
    // Files read with pread(): the task's framed records back to back, one allocation per task.
    std::unique_ptr<char[]> framed;
  };
  Pipeline(std::shared_ptr<const Dataset> dataset, const PipelineOptions& options, ShardPlan plan);
  void Start();
  void ReaderLoop();
  void DecodeLoop();
  void Fail(absl::Status status);
  int64_t BatchRows(int64_t batch) const;

  const std::shared_ptr<const Dataset> dataset_;
  const PipelineOptions options_;
  // Batch memory is reused: fresh pages cost a page fault each (hundreds per ImageNet image).
  std::shared_ptr<BatchBufferPool> pool_;
  const ShardPlan plan_;
  const TensorShape sample_shape_;
  const size_t sample_bytes_;
  int64_t num_batches_ = 0;
  int64_t num_positions_ = 0;  // plan entries that make it into batches
  int64_t first_padded_position_ = 0;

  mutable std::mutex mu_;
  std::condition_variable reader_cv_;    // readers wait for the window / queue space
  std::condition_variable decode_cv_;    // decoders wait for tasks
  std::condition_variable consumer_cv_;  // the consumer waits for the next batch
  int64_t next_read_ = 0;                // next plan position to claim
  int64_t next_batch_ = 0;               // next batch Next() returns
  std::deque<Task> queue_;
  size_t queue_capacity_ = 0;
  int readers_running_ = 0;
  std::map<int64_t, std::unique_ptr<Batch>> batches_;
  absl::Status error_;
  bool stop_ = false;

  std::atomic<int64_t> samples_{0};
  std::atomic<int64_t> bytes_read_{0};
  std::atomic<int64_t> read_ns_{0};
  std::atomic<int64_t> decode_ns_{0};
  int64_t wait_ns_ = 0;
  int64_t batches_out_ = 0;
  int64_t start_ns_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_PIPELINE_H_
