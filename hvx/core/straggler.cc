#include "hvx/core/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hvx {
namespace {

constexpr size_t kSampleBytes = 4 * sizeof(double);

// The median of `values` without element `skip`; 0 when none is left.
double MedianWithout(const std::vector<double>& values, size_t skip) {
  std::vector<double> rest;
  rest.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (i != skip) rest.push_back(values[i]);
  }
  if (rest.empty()) return 0;
  std::sort(rest.begin(), rest.end());
  const size_t n = rest.size();
  return n % 2 == 1 ? rest[n / 2] : (rest[n / 2 - 1] + rest[n / 2]) / 2;
}

}  // namespace

std::string EncodeWaitSample(const WaitSample& sample) {
  const double numbers[4] = {sample.wait_s, sample.op_wait_s, static_cast<double>(sample.ops),
                             sample.window_s};
  return std::string(reinterpret_cast<const char*>(numbers), kSampleBytes);
}

absl::StatusOr<WaitSample> DecodeWaitSample(absl::string_view bytes) {
  if (bytes.size() != kSampleBytes) {
    return absl::DataLossError(
        absl::StrCat("a straggler sample of ", bytes.size(), " bytes; it has ", kSampleBytes));
  }
  double numbers[4];
  std::memcpy(numbers, bytes.data(), kSampleBytes);
  for (double x : numbers) {
    if (!std::isfinite(x) || x < 0 || x > 1e15) {
      return absl::DataLossError(absl::StrCat("a straggler sample holds ", x));
    }
  }
  WaitSample s;
  s.wait_s = numbers[0];
  s.op_wait_s = numbers[1];
  s.ops = static_cast<int64_t>(numbers[2]);
  s.window_s = numbers[3];
  return s;
}

void WaitClock::Submitted(absl::Time submitted) {
  // An op submitted before the last drain (while the cycle that drained ran) is counted from it.
  if (waiting_since_ == absl::InfiniteFuture()) waiting_since_ = std::max(submitted, drained_);
}

void WaitClock::Agreed(absl::Time submitted, absl::Time now) {
  sample_.op_wait_s += std::max(0.0, absl::ToDoubleSeconds(now - submitted));
  ++sample_.ops;
}

void WaitClock::Drained(absl::Time now) {
  if (waiting_since_ == absl::InfiniteFuture()) return;
  sample_.wait_s += std::max(0.0, absl::ToDoubleSeconds(now - waiting_since_));
  waiting_since_ = absl::InfiniteFuture();
  drained_ = now;
}

WaitSample WaitClock::TakeWindow(absl::Time now) {
  if (waiting_since_ != absl::InfiniteFuture()) {
    sample_.wait_s += std::max(0.0, absl::ToDoubleSeconds(now - waiting_since_));
    waiting_since_ = now;
  }
  return std::exchange(sample_, WaitSample{});
}

StragglerDetector::StragglerDetector(StragglerOptions options, std::vector<std::string> who)
    : options_(options), who_(std::move(who)) {}

std::string StragglerDetector::Add(const std::vector<WaitSample>& samples, double window_s) {
  const size_t n = samples.size();
  if (n < 2 || window_s <= 0) return "";
  for (const WaitSample& s : samples) {
    if (s.ops == 0) return "";  // a rank that ran nothing this window says nothing about lateness
  }
  ++status_.windows;
  status_.window_s = window_s;
  std::vector<double> mean(n), wait(n);
  for (size_t r = 0; r < n; ++r) {
    mean[r] = samples[r].op_wait_s / samples[r].ops;
    wait[r] = samples[r].wait_s;
  }
  status_.late_ms.assign(n, 0);
  status_.share.assign(n, 0);
  int latest = 0;
  for (size_t r = 0; r < n; ++r) {
    status_.late_ms[r] = 1e3 * (MedianWithout(mean, r) - mean[r]);
    status_.share[r] = (MedianWithout(wait, r) - wait[r]) / window_s;
    if (status_.late_ms[r] > status_.late_ms[latest]) latest = static_cast<int>(r);
  }
  const bool waited_for = status_.late_ms[latest] >= 1e3 * options_.min_late_s &&
                          status_.share[latest] >= options_.min_share;
  since_warned_s_ += window_s;
  if (!waited_for) {
    candidate_ = -1;
    streak_ = 0;
    status_.rank = -1;
    return "";
  }
  streak_ = latest == candidate_ ? streak_ + 1 : 1;
  candidate_ = latest;
  if (streak_ < options_.windows) {
    status_.rank = -1;  // not (yet) persistent
    return "";
  }
  status_.rank = latest;
  if (warned_ == latest && since_warned_s_ < options_.repeat_s) return "";
  warned_ = latest;
  since_warned_s_ = 0;
  status_.warning = absl::StrFormat(
      "straggler: %s is late: it submitted its collectives %.1f ms after the median of the "
      "other ranks, who spent %.1f%% of the time waiting for it (%d windows of %.2f s in a row); "
      "the job runs at its pace",
      who_.size() > static_cast<size_t>(latest) ? who_[latest] : absl::StrCat("rank ", latest),
      status_.late_ms[latest], 100 * status_.share[latest], streak_, window_s);
  return status_.warning;
}

}  // namespace hvx
