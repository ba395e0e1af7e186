#include "hvx/data/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "hvx/common/logging.h"
#include "hvx/common/memory.h"
#include "hvx/common/status.h"

namespace hvx {
namespace data {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// Keeps up to `keep` buffers of `bytes` each for reuse. Shared by the pipeline and its batches,
// which may outlive it.
class BatchBufferPool {
 public:
  BatchBufferPool(size_t bytes, size_t keep) : bytes_(bytes), keep_(keep) {}
  ~BatchBufferPool() {
    for (uint8_t* p : free_) std::free(p);
  }
  size_t bytes() const { return bytes_; }

  uint8_t* Get() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        uint8_t* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    return Allocate(bytes_);
  }
  void Put(uint8_t* p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (free_.size() < keep_) {
        free_.push_back(p);
        return;
      }
    }
    std::free(p);
  }

  // 64-byte aligned (vector loads, framework tensors); buffers of a huge page or more are whole
  // huge pages, which cuts page faults 512-fold.
  static uint8_t* Allocate(size_t bytes) {
    if (bytes >= kHugePageBytes) return static_cast<uint8_t*>(AllocateHugePages(bytes));
    size_t rounded = (bytes + 63) / 64 * 64;
    return static_cast<uint8_t*>(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
  }

 private:
  const size_t bytes_;
  const size_t keep_;
  std::mutex mu_;
  std::vector<uint8_t*> free_;
};

void Batch::Release::operator()(uint8_t* p) const {
  if (pool) {
    pool->Put(p);
  } else {
    std::free(p);
  }
}

Batch::Batch(int64_t index, DataType dtype, TensorShape shape)
    : Batch(index, dtype, std::move(shape), nullptr) {}

Batch::Batch(int64_t index, DataType dtype, TensorShape shape,
             std::shared_ptr<BatchBufferPool> pool)
    : index_(index),
      dtype_(dtype),
      shape_(std::move(shape)),
      num_bytes_(static_cast<size_t>(shape_.num_elements()) * DataTypeSize(dtype_)),
      data_(pool ? pool->Get() : BatchBufferPool::Allocate(num_bytes_), Release{pool}) {
  if (data_ == nullptr)
    HVX_CHECK(false) << "out of memory allocating a " << num_bytes_ << "-byte batch";
  labels_.assign(static_cast<size_t>(shape_.dim(0)), 0);
  sample_ids_.assign(static_cast<size_t>(shape_.dim(0)), -1);
}

Pipeline::Pipeline(std::shared_ptr<const Dataset> dataset, const PipelineOptions& options,
                   ShardPlan plan)
    : dataset_(std::move(dataset)),
      options_(options),
      plan_(std::move(plan)),
      sample_shape_(options.decoder->sample_shape()),
      sample_bytes_(static_cast<size_t>(sample_shape_.num_elements()) *
                    DataTypeSize(options.decoder->dtype())) {
  const int64_t n = static_cast<int64_t>(plan_.sample_ids.size());
  const int64_t b = options_.batch_size;
  num_batches_ = options_.drop_last_batch ? n / b : (n + b - 1) / b;
  if (options_.max_batches > 0) num_batches_ = std::min(num_batches_, options_.max_batches);
  num_positions_ = std::min(n, num_batches_ * b);
  first_padded_position_ = n - plan_.num_padded;
  queue_capacity_ = static_cast<size_t>(std::max(4, 2 * options_.decode_threads));
  pool_ = std::make_shared<BatchBufferPool>(static_cast<size_t>(b) * sample_bytes_,
                                            static_cast<size_t>(options_.prefetch_batches) + 4);
}

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(std::shared_ptr<const Dataset> dataset,
                                                           const PipelineOptions& options) {
  if (dataset == nullptr || options.decoder == nullptr) {
    return absl::InvalidArgumentError("pipeline: a dataset and a decoder are required");
  }
  if (options.batch_size < 1 || options.reader_threads < 1 || options.decode_threads < 1 ||
      options.prefetch_batches < 1 || options.samples_per_task < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: batch_size (", options.batch_size, "), reader_threads (",
                     options.reader_threads, "), decode_threads (", options.decode_threads,
                     "), prefetch_batches (", options.prefetch_batches, ") and samples_per_task (",
                     options.samples_per_task, ") must be at least 1"));
  }
  if (options.max_batches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: max_batches (", options.max_batches, ") must not be negative"));
  }
  if (dataset->num_samples() == 0) {
    return absl::FailedPreconditionError("pipeline: the dataset has no records");
  }
  ShardPlanOptions plan_options = options.plan;
  plan_options.num_samples = dataset->num_samples();
  HVX_ASSIGN_OR_RETURN(ShardPlan plan, MakeShardPlan(plan_options));
  std::unique_ptr<Pipeline> p(new Pipeline(std::move(dataset), options, std::move(plan)));
  p->Start();
  return p;
}

void Pipeline::Start() {
  start_ns_ = NowNs();
  readers_running_ = options_.reader_threads;
  for (int i = 0; i < options_.reader_threads; ++i) threads_.emplace_back([this] { ReaderLoop(); });
  for (int i = 0; i < options_.decode_threads; ++i) threads_.emplace_back([this] { DecodeLoop(); });
}

Pipeline::~Pipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  reader_cv_.notify_all();
  decode_cv_.notify_all();
  consumer_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Pipeline::Fail(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = std::move(status);
    stop_ = true;
  }
  reader_cv_.notify_all();
  decode_cv_.notify_all();
  consumer_cv_.notify_all();
}

int64_t Pipeline::BatchRows(int64_t batch) const {
  return std::min(options_.batch_size, num_positions_ - batch * options_.batch_size);
}

void Pipeline::ReaderLoop() {
  const int64_t window = options_.prefetch_batches;
  const int64_t b = options_.batch_size;
  while (true) {
    Task task;
    int64_t end;
    {
      std::unique_lock<std::mutex> lock(mu_);
      reader_cv_.wait(lock, [&] {
        return stop_ || next_read_ >= num_positions_ ||
               (next_read_ / b < next_batch_ + window && queue_.size() < queue_capacity_);
      });
      if (stop_ || next_read_ >= num_positions_) break;
      task.first = next_read_;
      end = std::min(
          {next_read_ + options_.samples_per_task, (next_read_ / b + 1) * b, num_positions_});
      next_read_ = end;
    }
    task.records.resize(static_cast<size_t>(end - task.first));
    const int64_t t0 = NowNs();
    const bool mapped = dataset_->mapped();
    if (!mapped) {
      size_t total = 0;
      for (int64_t pos = task.first; pos < end; ++pos) {
        total += dataset_->FramedSize(plan_.sample_ids[static_cast<size_t>(pos)]);
      }
      task.framed.reset(new char[total]);
    }
    absl::Status s;
    int64_t bytes = 0;
    char* next = task.framed.get();
    for (int64_t pos = task.first; pos < end && s.ok(); ++pos) {
      const int64_t id = plan_.sample_ids[static_cast<size_t>(pos)];
      const size_t i = static_cast<size_t>(pos - task.first);
      absl::string_view& record = task.records[i];
      s = dataset_->ViewInto(id, options_.verify_crc, next, &record);
      if (!mapped) next += dataset_->FramedSize(id);
      if (!s.ok())
        s = Annotate(s, absl::StrCat("rank ", options_.plan.rank, " reading sample ", id));
      bytes += static_cast<int64_t>(record.size());
    }
    read_ns_ += NowNs() - t0;
    if (!s.ok()) {
      Fail(s);
      break;
    }
    bytes_read_ += bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    decode_cv_.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    --readers_running_;
  }
  decode_cv_.notify_all();
}

void Pipeline::DecodeLoop() {
  const Decoder& decoder = *options_.decoder;
  std::vector<int64_t> labels;
  while (true) {
    Task task;
    Batch* batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      decode_cv_.wait(lock, [&] { return stop_ || !queue_.empty() || readers_running_ == 0; });
      if (stop_ || queue_.empty()) break;
      task = std::move(queue_.front());
      queue_.pop_front();
      const int64_t b = task.first / options_.batch_size;
      auto& slot = batches_[b];
      if (!slot) {
        std::vector<int64_t> dims = {BatchRows(b)};
        dims.insert(dims.end(), sample_shape_.dims().begin(), sample_shape_.dims().end());
        slot.reset(new Batch(b, decoder.dtype(), TensorShape(dims), pool_));
      }
      batch = slot.get();
    }
    reader_cv_.notify_one();
    const int64_t count = static_cast<int64_t>(task.records.size());
    const int64_t first_row = task.first % options_.batch_size;
    labels.assign(static_cast<size_t>(count), 0);
    const int64_t t0 = NowNs();
    absl::Status s;
    for (int64_t i = 0; i < count && s.ok(); ++i) {
      const int64_t id = plan_.sample_ids[static_cast<size_t>(task.first + i)];
      // Rows of a batch are distinct memory, so decoders write without holding the lock.
      s = decoder.Decode(task.records[static_cast<size_t>(i)],
                         {options_.plan.seed, options_.plan.epoch, id},
                         static_cast<uint8_t*>(batch->data()) + (first_row + i) * sample_bytes_,
                         &labels[static_cast<size_t>(i)]);
      if (!s.ok()) {
        s = Annotate(s,
                     absl::StrCat("rank ", options_.plan.rank, ": ", dataset_->DescribeSample(id)));
      }
    }
    decode_ns_ += NowNs() - t0;
    if (!s.ok()) {
      Fail(s);
      break;
    }
    samples_ += count;
    bool complete;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int64_t i = 0; i < count; ++i) {
        const size_t row = static_cast<size_t>(first_row + i);
        batch->labels_[row] = labels[static_cast<size_t>(i)];
        batch->sample_ids_[row] = plan_.sample_ids[static_cast<size_t>(task.first + i)];
        if (task.first + i >= first_padded_position_) ++batch->num_padded_;
      }
      batch->filled_ += count;
      complete = batch->filled_ == batch->size();
    }
    if (complete) consumer_cv_.notify_all();
  }
}

absl::StatusOr<std::unique_ptr<Batch>> Pipeline::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (next_batch_ >= num_batches_ && error_.ok()) {
    return absl::OutOfRangeError(absl::StrCat("rank ", options_.plan.rank, ": end of epoch ",
                                              options_.plan.epoch, " after ", num_batches_,
                                              " batches"));
  }
  const int64_t t0 = NowNs();
  consumer_cv_.wait(lock, [&] {
    if (!error_.ok() || stop_) return true;
    auto it = batches_.find(next_batch_);
    return it != batches_.end() && it->second->filled_ == it->second->size();
  });
  wait_ns_ += NowNs() - t0;
  if (!error_.ok()) return error_;
  if (stop_) return absl::CancelledError("pipeline stopped");
  auto it = batches_.find(next_batch_);
  std::unique_ptr<Batch> batch = std::move(it->second);
  batches_.erase(it);
  ++next_batch_;
  ++batches_out_;
  lock.unlock();
  reader_cv_.notify_all();
  return batch;
}

PipelineStats Pipeline::stats() const {
  PipelineStats s;
  s.samples = samples_.load();
  s.bytes_read = bytes_read_.load();
  s.read_busy_s = read_ns_.load() * 1e-9;
  s.decode_busy_s = decode_ns_.load() * 1e-9;
  s.elapsed_s = (NowNs() - start_ns_) * 1e-9;
  std::lock_guard<std::mutex> lock(mu_);
  s.consumer_wait_s = wait_ns_ * 1e-9;
  s.batches = batches_out_;
  return s;
}

}  // namespace data
}  // namespace hvx
