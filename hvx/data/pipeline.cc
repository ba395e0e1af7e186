#include "hvx/data/pipeline.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
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

Batch::Batch(int64_t index, DataType dtype, TensorShape shape)
    : index_(index), dtype_(dtype), shape_(std::move(shape)) {
  num_bytes_ = static_cast<size_t>(shape_.num_elements()) * DataTypeSize(dtype_);
  // 64-byte alignment suits vector loads and framework tensors wrapping the memory.
  size_t rounded = (num_bytes_ + 63) / 64 * 64;
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded == 0 ? 64 : rounded)));
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
  num_positions_ = std::min(n, num_batches_ * b);
  first_padded_position_ = n - plan_.num_padded;
  raw_capacity_ = static_cast<size_t>(std::max(16, 4 * options_.decode_threads));
}

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(std::shared_ptr<const Dataset> dataset,
                                                           const PipelineOptions& options) {
  if (dataset == nullptr || options.decoder == nullptr) {
    return absl::InvalidArgumentError("pipeline: a dataset and a decoder are required");
  }
  if (options.batch_size < 1 || options.reader_threads < 1 || options.decode_threads < 1 ||
      options.prefetch_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline: batch_size (", options.batch_size, "), reader_threads (", options.reader_threads,
        "), decode_threads (", options.decode_threads, ") and prefetch_batches (",
        options.prefetch_batches, ") must be at least 1"));
  }
  if (dataset->num_samples() == 0) {
    return absl::FailedPreconditionError("pipeline: the dataset has no records");
  }
  ShardPlanOptions plan_options;
  plan_options.num_samples = dataset->num_samples();
  plan_options.rank = options.rank;
  plan_options.size = options.size;
  plan_options.epoch = options.epoch;
  plan_options.seed = options.seed;
  plan_options.remainder = options.remainder;
  plan_options.shuffle = options.shuffle;
  plan_options.consumed = options.consumed;
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
  while (true) {
    int64_t position;
    {
      std::unique_lock<std::mutex> lock(mu_);
      reader_cv_.wait(lock, [&] {
        return stop_ || next_read_ >= num_positions_ ||
               (next_read_ / options_.batch_size < next_batch_ + window &&
                raw_queue_.size() < raw_capacity_);
      });
      if (stop_ || next_read_ >= num_positions_) break;
      position = next_read_++;
    }
    const int64_t id = plan_.sample_ids[static_cast<size_t>(position)];
    Raw raw{position, std::string()};
    const int64_t t0 = NowNs();
    absl::Status s = dataset_->Read(id, options_.verify_crc, &raw.bytes);
    read_ns_ += NowNs() - t0;
    if (!s.ok()) {
      Fail(Annotate(s, absl::StrCat("rank ", options_.rank, " reading sample ", id)));
      break;
    }
    bytes_read_ += static_cast<int64_t>(raw.bytes.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      raw_queue_.push_back(std::move(raw));
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
  while (true) {
    Raw raw;
    Batch* batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      decode_cv_.wait(lock, [&] { return stop_ || !raw_queue_.empty() || readers_running_ == 0; });
      if (stop_ || raw_queue_.empty()) break;
      raw = std::move(raw_queue_.front());
      raw_queue_.pop_front();
      const int64_t b = raw.position / options_.batch_size;
      auto& slot = batches_[b];
      if (!slot) {
        TensorShape shape = sample_shape_;
        std::vector<int64_t> dims = {BatchRows(b)};
        dims.insert(dims.end(), shape.dims().begin(), shape.dims().end());
        slot = std::make_unique<Batch>(b, decoder.dtype(), TensorShape(dims));
      }
      batch = slot.get();
    }
    reader_cv_.notify_one();
    const int64_t row = raw.position % options_.batch_size;
    const int64_t id = plan_.sample_ids[static_cast<size_t>(raw.position)];
    int64_t label = 0;
    const int64_t t0 = NowNs();
    // Rows of one batch are distinct memory, so decoders write without holding the lock.
    absl::Status s = decoder.Decode(raw.bytes, {options_.seed, options_.epoch, id},
                                    static_cast<uint8_t*>(batch->data()) + row * sample_bytes_, &label);
    decode_ns_ += NowNs() - t0;
    if (!s.ok()) {
      Fail(Annotate(s, absl::StrCat("rank ", options_.rank, ": ", dataset_->DescribeSample(id))));
      break;
    }
    ++samples_;
    bool complete;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch->labels_[static_cast<size_t>(row)] = label;
      batch->sample_ids_[static_cast<size_t>(row)] = id;
      if (raw.position >= first_padded_position_) ++batch->num_padded_;
      complete = ++batch->filled_ == batch->size();
    }
    if (complete) consumer_cv_.notify_all();
  }
}

absl::StatusOr<std::unique_ptr<Batch>> Pipeline::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (next_batch_ >= num_batches_ && error_.ok()) {
    return absl::OutOfRangeError(absl::StrCat("rank ", options_.rank, ": end of epoch ",
                                              options_.epoch, " after ", num_batches_, " batches"));
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
