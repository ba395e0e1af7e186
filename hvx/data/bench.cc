// Data-layer benchmark: one run prints every data number of BENCHMARKS.md.
//
//   bazel run -c opt //hvx/data:bench -- --dir=/tmp/hvx_data_bench --mib=256
//
// 1. CRC-32C: hardware path vs the portable tables.
// 2. Record reading with CRC verification vs plain read() of the same (page-cache warm) files.
//    Also the least a reader verifying records in place in a mapping of the file could cost.
// 3. Fashion-MNIST pipeline images/s vs the decode-only ceiling of one thread.
// 4. ImageNet-like JPEG pipeline images/s per decode thread vs the decode-only ceiling.
// Rates are wall-clock; "cpu" figures divide by process CPU time, which is what counts on a
// machine shared with other work.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "hvx/common/files.h"
#include "hvx/data/crc32c.h"
#include "hvx/data/dataset.h"
#include "hvx/data/decoder.h"
#include "hvx/data/example.h"
#include "hvx/data/idx.h"
#include "hvx/data/index.h"
#include "hvx/data/jpeg.h"
#include "hvx/data/pipeline.h"
#include "hvx/data/random.h"
#include "hvx/data/record.h"
#include "hvx/data/test_util.h"

ABSL_FLAG(std::string, dir, "/tmp/hvx_data_bench", "scratch directory (files are kept for reruns)");
ABSL_FLAG(int, mib, 256, "size of each record-reading test file");
ABSL_FLAG(int, jpeg_records, 600, "records in the JPEG dataset");
ABSL_FLAG(int, buffer_kib, 256, "read buffer of plain read() and of the record reader");
ABSL_FLAG(int, map_kib, 4096, "window of the mapped lower bound in the reading section");
ABSL_FLAG(std::string, read_payloads, "110000,8192,850", "payload sizes of the reading section");
ABSL_FLAG(std::string, random_payloads, "110000,850", "payload sizes of the random-access section");
ABSL_FLAG(int, reps, 9, "interleaved repetitions of the reading comparisons (medians are printed)");
ABSL_FLAG(std::string, sections, "crc,read,random,fashion,jpeg", "which parts to run");
ABSL_FLAG(std::string, fashion_mnist, "/usr/share/datasets/fashion-mnist", "IDX directory");

namespace hvx {
namespace data {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double Cpu(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Timing {
  double wall = 1e30, cpu = 1e30;
};

// Best of `reps` runs of fn (wall and thread CPU time).
Timing Best(int reps, const std::function<void()>& fn) {
  Timing best;
  for (int i = 0; i < reps; ++i) {
    double w = Now(), c = Cpu(CLOCK_THREAD_CPUTIME_ID);
    fn();
    best.wall = std::min(best.wall, Now() - w);
    best.cpu = std::min(best.cpu, Cpu(CLOCK_THREAD_CPUTIME_ID) - c);
  }
  return best;
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

void CrcBench() {
  std::vector<char> buf(256 << 10);
  SampleRng rng(1);
  for (char& c : buf) c = static_cast<char>(rng.Next());
  const int rounds = 2048;  // 512 MiB through an L2-resident buffer
  uint32_t sink = 0;
  const double bytes = static_cast<double>(buf.size()) * rounds;
  Timing best = Best(3, [&] {
    for (int i = 0; i < rounds; ++i) sink ^= Crc32c(buf.data(), buf.size());
  });
  Timing lanes = Best(3, [&] {
    for (int i = 0; i < rounds; ++i) sink ^= Crc32cThreeLaneExtend(0, buf.data(), buf.size());
  });
  Timing portable = Best(3, [&] {
    for (int i = 0; i < rounds / 8; ++i) sink ^= Crc32cPortableExtend(0, buf.data(), buf.size());
  });
  std::printf(
      "crc32c (256 KiB buffer) %s: %.1f GB/s | sse4.2 three-lane %.1f GB/s | portable "
      "%.2f GB/s  (cpu-time rates) [%u]\n",
      Crc32cImplementation(), bytes / best.cpu / 1e9, bytes / lanes.cpu / 1e9,
      bytes / 8 / portable.cpu / 1e9, sink & 1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Wall and thread-CPU seconds of one call of fn.
Timing Once(const std::function<void()>& fn) {
  Timing t;
  const double w = Now(), c = Cpu(CLOCK_THREAD_CPUTIME_ID);
  fn();
  t.wall = Now() - w;
  t.cpu = Cpu(CLOCK_THREAD_CPUTIME_ID) - c;
  return t;
}

std::vector<size_t> ParseSizes(const std::string& list) {
  std::vector<size_t> sizes;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    size_t v;
    if (!absl::SimpleAtoi(part, &v))
      Check(absl::InvalidArgumentError(absl::StrCat("bad size ", part)));
    sizes.push_back(v);
  }
  return sizes;
}

// Record files of `payload_size`-byte records, about `mib` MiB each, created once and reused.
std::string RecordFileFor(const std::string& dir, size_t payload_size, int mib) {
  const std::string path = absl::StrCat(dir, "/read-", payload_size);
  const size_t n = (static_cast<size_t>(mib) << 20) / (payload_size + kRecordOverhead);
  if (::access(path.c_str(), R_OK) != 0 || ::access(IndexPathFor(path).c_str(), R_OK) != 0) {
    RecordWriterOptions wo;
    wo.write_index = true;
    auto w = RecordWriter::Open(path, wo);
    Check(w.status());
    std::string payload(payload_size, '\0');
    SampleRng rng(payload_size);
    for (char& c : payload) c = static_cast<char>(rng.Next());
    for (size_t i = 0; i < n; ++i) {
      payload[i % payload_size] ^= 1;
      Check((*w)->Write(payload));
    }
    Check((*w)->Close());
  }
  return path;
}

// Sequential reading. The baseline is the cheapest way to get the same bytes with the same
// buffer-size policy: read() of `buffer_kib` at a time into one reused buffer, front to back. Raw,
// verified and unverified runs alternate, and each verified run is compared with the raw run
// just before it, so that load from other processes hits both sides of a ratio alike; the
// medians of those ratios are reported.
void ReadBench(const std::string& dir, int mib) {
  const size_t buffer_size = static_cast<size_t>(absl::GetFlag(FLAGS_buffer_kib)) << 10;
  const int reps = absl::GetFlag(FLAGS_reps);
  for (size_t payload_size : ParseSizes(absl::GetFlag(FLAGS_read_payloads))) {
    const std::string path = RecordFileFor(dir, payload_size, mib);
    // The same kind of memory RecordReader reads into: 2 MiB-aligned, transparent huge pages.
    const size_t huge = size_t{2} << 20;
    const size_t bytes = (buffer_size + huge - 1) / huge * huge;
    void* mem = std::aligned_alloc(huge, bytes);
    Check(mem != nullptr ? absl::OkStatus() : absl::ResourceExhaustedError("buffer"));
    ::madvise(mem, bytes, MADV_HUGEPAGE);
    std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(mem), &std::free);
    uint64_t raw_bytes = 0;
    auto raw = [&] {
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      raw_bytes = 0;
      ssize_t r;
      while ((r = ::read(fd, buf.get(), buffer_size)) > 0) raw_bytes += static_cast<uint64_t>(r);
      ::close(fd);
    };
    // The least work any reader that verifies records in place in a mapping of the file could
    // do: map a window (populated), CRC every byte of it with the long-buffer kernel (no framing,
    // no per-record calls), unmap. If this is slower than raw, so is every such reader.
    const size_t map_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_map_kib)) << 10;
    uint32_t map_sink = 0;
    auto mapped = [&] {
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st;
      Check(fd >= 0 && ::fstat(fd, &st) == 0 ? absl::OkStatus() : absl::InternalError(path));
      const size_t size = static_cast<size_t>(st.st_size);
      for (size_t off = 0; off < size; off += map_bytes) {
        const size_t n = std::min(map_bytes, size - off);
        void* p =
            ::mmap(nullptr, n, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(off));
        Check(p != MAP_FAILED ? absl::OkStatus() : absl::InternalError("mmap " + path));
        map_sink ^= Crc32c(p, n);
        ::munmap(p, n);
      }
      ::close(fd);
    };
    int64_t records = 0;
    auto records_fn = [&](bool verify) {
      return [&, verify] {
        RecordReaderOptions o;
        o.verify_crc = verify;
        o.buffer_size = buffer_size;
        auto reader = RecordReader::Open(path, o);
        Check(reader.status());
        records = 0;
        absl::string_view rec;
        absl::Status s;
        while ((s = (*reader)->ReadRecord(&rec)).ok()) ++records;
        if (!absl::IsOutOfRange(s)) Check(s);
      };
    };
    raw();  // warm the page cache
    std::vector<double> raw_gbs, verify_gbs, verify_cpu_gbs, plain_gbs, ratio, ratio_cpu, map_ratio;
    for (int rep = 0; rep < reps; ++rep) {
      const Timing r = Once(raw);
      const Timing v = Once(records_fn(true));
      const Timing p = Once(records_fn(false));
      const Timing m = Once(mapped);
      raw_gbs.push_back(raw_bytes / r.wall / 1e9);
      verify_gbs.push_back(raw_bytes / v.wall / 1e9);
      verify_cpu_gbs.push_back(raw_bytes / v.cpu / 1e9);
      plain_gbs.push_back(raw_bytes / p.wall / 1e9);
      ratio.push_back(r.wall / v.wall);
      ratio_cpu.push_back(r.cpu / v.cpu);
      map_ratio.push_back(r.wall / m.wall);
    }
    const double verify_median = Median(verify_gbs);
    std::printf(
        "records %6zu B (medians of %d): read() %.2f GB/s | verified %.2f GB/s %.2f M rec/s (cpu "
        "%.2f GB/s) | no CRC %.2f GB/s | verified/raw %.2f (cpu %.2f) [range %.2f-%.2f] | mapped "
        "%zu KiB windows + CRC (bound) / raw %.2f [%u]\n",
        payload_size, reps, Median(raw_gbs), verify_median,
        verify_median * 1e9 / static_cast<double>(payload_size + kRecordOverhead) / 1e6,
        Median(verify_cpu_gbs), Median(plain_gbs), Median(ratio), Median(ratio_cpu),
        *std::min_element(ratio.begin(), ratio.end()),
        *std::max_element(ratio.begin(), ratio.end()), map_bytes >> 10, Median(map_ratio),
        map_sink & 1);
    (void)records;
  }
}

// Random access as the pipeline does it: every record of a file once, in shuffled order, with
// both CRCs checked, through pread() (default) or a memory mapping (opt-in). "first pass" opens
// the file anew, so the mapping's page faults are counted; "again" reuses the open dataset
// (later epochs).
void RandomBench(const std::string& dir, int mib) {
  const int reps = absl::GetFlag(FLAGS_reps);
  for (size_t payload_size : ParseSizes(absl::GetFlag(FLAGS_random_payloads))) {
    const std::string path = RecordFileFor(dir, payload_size, mib);
    std::vector<std::vector<double>> first(3), again(3), first_cpu(3);
    int64_t n = 0;
    for (int rep = 0; rep < reps; ++rep) {
      for (int access = 0; access < 3; ++access) {
        DatasetOptions o;
        o.use_mmap = access == 1;
        o.load_into_memory = access == 2;
        std::unique_ptr<Dataset> dataset;
        std::vector<int64_t> order;
        std::vector<char> buffer;
        auto pass = [&] {
          absl::string_view view;
          for (int64_t id : order) Check(dataset->ViewInto(id, true, buffer.data(), &view));
        };
        const Timing t = Once([&] {
          auto opened = Dataset::OpenFiles({path}, o);
          Check(opened.status());
          dataset = std::move(*opened);
          n = dataset->num_samples();
          order.resize(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
          SampleRng rng(static_cast<uint64_t>(rep));
          for (int64_t i = n - 1; i > 0; --i) {
            std::swap(order[static_cast<size_t>(i)],
                      order[rng.Below(static_cast<uint64_t>(i + 1))]);
          }
          buffer.resize(payload_size + kRecordOverhead);
          pass();
        });
        first[access].push_back(n / t.wall);
        first_cpu[access].push_back(n / t.cpu);
        again[access].push_back(n / Once(pass).wall);
      }
    }
    for (int access = 0; access < 3; ++access) {
      std::printf(
          "random access %6zu B, %lld records (medians of %d), %-6s: open + first pass %.3f M "
          "rec/s (cpu %.3f), again %.3f M rec/s\n",
          payload_size, static_cast<long long>(n), reps,
          access == 0   ? "pread"
          : access == 1 ? "mmap"
                        : "memory",
          Median(first[access]) / 1e6, Median(first_cpu[access]) / 1e6,
          Median(again[access]) / 1e6);
    }
  }
}

struct PipelineRun {
  double images_per_s = 0;
  double images_per_cpu_s = 0;
  double wait_fraction = 0;
};

PipelineRun RunPipeline(std::shared_ptr<const Dataset> dataset,
                        std::shared_ptr<const Decoder> decoder, int decode_threads,
                        int64_t batch_size) {
  PipelineOptions o;
  o.batch_size = batch_size;
  o.decode_threads = decode_threads;
  o.reader_threads = 1;
  o.prefetch_batches = 8;
  o.decoder = std::move(decoder);
  const double w = Now(), c = Cpu(CLOCK_PROCESS_CPUTIME_ID);
  auto p = Pipeline::Create(std::move(dataset), o);
  Check(p.status());
  int64_t images = 0;
  while (true) {
    auto b = (*p)->Next();
    if (absl::IsOutOfRange(b.status())) break;
    Check(b.status());
    images += (*b)->size();
  }
  const double wall = Now() - w, cpu = Cpu(CLOCK_PROCESS_CPUTIME_ID) - c;
  PipelineStats s = (*p)->stats();
  return {images / wall, images / cpu, s.consumer_wait_s / wall};
}

// Decode-only ceiling: one thread decoding payloads already in memory.
double DecodeCeiling(const Dataset& dataset, const Decoder& decoder, int64_t count,
                     double* cpu_rate) {
  std::vector<std::string> payloads(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    Check(dataset.Read(i, false, &payloads[static_cast<size_t>(i)]));
  std::vector<uint8_t> out(static_cast<size_t>(decoder.sample_shape().num_elements()) *
                           DataTypeSize(decoder.dtype()));
  int64_t label;
  Timing t = Best(3, [&] {
    for (int64_t i = 0; i < count; ++i) {
      Check(decoder.Decode(payloads[static_cast<size_t>(i)], {1, 0, i}, out.data(), &label));
    }
  });
  *cpu_rate = count / t.cpu;
  return count / t.wall;
}

void FashionBench(const std::string& dir, const std::string& fm) {
  const std::string out = dir + "/fmnist";
  if (::access((out + "/train-00003-of-00004.idx").c_str(), R_OK) != 0) {
    Check(WriteIdxShards(fm + "/train-images-idx3-ubyte.gz", fm + "/train-labels-idx1-ubyte.gz",
                         out, "train", 4)
              .status());
  }
  auto opened = Dataset::Open({out + "/train-*-of-00004"}, {});
  Check(opened.status());
  std::shared_ptr<const Dataset> dataset = std::move(*opened);
  DatasetOptions mmap_options;
  mmap_options.use_mmap = true;
  auto opened_mapped = Dataset::Open({out + "/train-*-of-00004"}, mmap_options);
  Check(opened_mapped.status());
  DatasetOptions memory_options;
  memory_options.load_into_memory = true;
  auto opened_memory = Dataset::Open({out + "/train-*-of-00004"}, memory_options);
  Check(opened_memory.status());
  const std::shared_ptr<const Dataset> datasets[3] = {dataset, std::move(*opened_mapped),
                                                      std::move(*opened_memory)};
  const char* const names[3] = {"pread", "mmap", "memory"};
  for (DataType dtype : {DataType::kUint8, DataType::kFloat32}) {
    RawImageDecoderOptions o;
    o.dtype = dtype;
    o.mean = {0.2860f};
    o.stddev = {0.3530f};
    auto decoder = std::make_shared<RawImageDecoder>(o);
    double ceiling_cpu;
    const double ceiling = DecodeCeiling(*dataset, *decoder, 60000, &ceiling_cpu);
    for (int threads : {1, 2}) {
      // pread (the default), mmap and memory alternate; medians of three each.
      std::vector<double> rate[3], cpu_rate[3], wait[3];
      for (int rep = 0; rep < 3; ++rep) {
        for (int m = 0; m < 3; ++m) {
          PipelineRun r = RunPipeline(datasets[m], decoder, threads, 256);
          rate[m].push_back(r.images_per_s);
          cpu_rate[m].push_back(r.images_per_cpu_s);
          wait[m].push_back(r.wait_fraction);
        }
      }
      for (int m = 0; m < 3; ++m) {
        std::printf(
            "fashion-mnist %-7s decode-only %.0f img/s (cpu %.0f) | pipeline (%s), %d decode "
            "thread(s): %.0f img/s (%.0f per cpu-s), %.2f of ceiling, consumer waited %.0f%%\n",
            std::string(DataTypeName(dtype)).c_str(), ceiling, ceiling_cpu, names[m], threads,
            Median(rate[m]), Median(cpu_rate[m]), Median(rate[m]) / ceiling, 100 * Median(wait[m]));
      }
    }
  }
}

// Full-size decodes of the dataset's JPEGs (libjpeg-turbo alone, no crop or resize): images/s.
double FullDecodeRate(const Dataset& dataset, int64_t count) {
  std::vector<std::string> jpegs(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    std::string payload;
    Check(dataset.Read(i, false, &payload));
    Example e;
    Check(ParseExample(payload, &e));
    jpegs[static_cast<size_t>(i)] = std::string(*GetBytes(e, "image/encoded"));
  }
  RgbImage image;
  Timing t = Best(3, [&] {
    for (const std::string& jpeg : jpegs) Check(DecodeJpeg(jpeg, 1, JpegLimits(), &image));
  });
  return count / t.wall;
}

void JpegBench(const std::string& dir, int num_records) {
  const std::string path = absl::StrCat(dir, "/jpeg-photo-", num_records);
  size_t jpeg_bytes = 0;
  if (::access(path.c_str(), R_OK) != 0) {
    // 500x375 (ImageNet's most common size) photos with natural-image statistics (SyntheticPhoto:
    // 1/f noise and hard edges), ~110 KB at quality 90.
    std::vector<std::string> jpegs;
    for (int k = 0; k < 32; ++k) {
      auto jpeg = EncodeJpeg(SyntheticPhoto(500, 375, static_cast<uint64_t>(k)), 90);
      Check(jpeg.status());
      jpegs.push_back(*jpeg);
    }
    RecordWriterOptions wo;
    wo.write_index = true;
    auto w = RecordWriter::Open(path, wo);
    Check(w.status());
    for (int i = 0; i < num_records; ++i) {
      Example e;
      SetBytes(&e, "image/encoded", jpegs[static_cast<size_t>(i) % jpegs.size()]);
      SetInt64(&e, "image/class/label", 1 + i % 1000);
      Check((*w)->Write(SerializeExample(e)));
    }
    Check((*w)->Close());
  }
  auto opened = Dataset::OpenFiles({path}, {});
  Check(opened.status());
  std::shared_ptr<const Dataset> dataset = std::move(*opened);
  jpeg_bytes = dataset->LocationOf(0).length;
  const int64_t count = std::min<int64_t>(200, num_records);
  const double full_decode = FullDecodeRate(*dataset, count);
  std::printf("jpeg 500x375 ~%zu KB: full-size decode alone (libjpeg-turbo, 1 thread) %.0f img/s\n",
              jpeg_bytes / 1000, full_decode);
  for (bool train : {true, false}) {
    // "whole": the decoder before decode_crop (decode every pixel, then crop), the baseline;
    // "crop": the default.
    // "nhwc": the default with channels_last output.
    double ceiling[3], ceiling_cpu[3];
    PipelineRun one[3];
    const char* names[3] = {"whole", "crop", "nhwc"};
    for (int m = 0; m < 3; ++m) {
      ImageNetDecoderOptions o =
          train ? ImageNetDecoderOptions::Train() : ImageNetDecoderOptions::Eval();
      o.decode_crop = m >= 1;
      o.channels_last = m == 2;
      auto decoder = std::make_shared<ImageNetDecoder>(o);
      ceiling[m] = DecodeCeiling(*dataset, *decoder, count, &ceiling_cpu[m]);
      for (int threads : {1, 2}) {
        PipelineRun r = RunPipeline(dataset, decoder, threads, 32);
        if (threads == 1) one[m] = r;
        std::printf(
            "jpeg %-5s %-5s decoder alone %.0f img/s (cpu %.0f) | pipeline, %d decode thread(s): "
            "%.0f img/s = %.0f per decode thread (%.0f per cpu-s), %.2f of %d x the decoder "
            "alone, %.2f of %d x full-size decode\n",
            train ? "train" : "eval", names[m], ceiling[m], ceiling_cpu[m], threads, r.images_per_s,
            r.images_per_s / threads, r.images_per_cpu_s, r.images_per_s / (threads * ceiling[m]),
            threads, r.images_per_s / (threads * full_decode), threads);
      }
    }
    std::printf(
        "jpeg %-5s crop vs whole: decoder alone %.2fx, pipeline per decode thread %.2fx; nhwc vs "
        "whole: %.2fx, %.2fx\n",
        train ? "train" : "eval", ceiling[1] / ceiling[0],
        one[1].images_per_s / one[0].images_per_s, ceiling[2] / ceiling[0],
        one[2].images_per_s / one[0].images_per_s);
  }
}

}  // namespace
}  // namespace data
}  // namespace hvx

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  hvx::data::Check(hvx::MakeDirs(dir));
  std::printf("hvx/data bench: %ld online CPUs, scratch %s\n", sysconf(_SC_NPROCESSORS_ONLN),
              dir.c_str());
  const std::string sections = absl::GetFlag(FLAGS_sections);
  auto want = [&](const char* s) { return sections.find(s) != std::string::npos; };
  if (want("crc")) hvx::data::CrcBench();
  if (want("read")) hvx::data::ReadBench(dir, absl::GetFlag(FLAGS_mib));
  if (want("random")) hvx::data::RandomBench(dir, absl::GetFlag(FLAGS_mib));
  if (want("fashion")) hvx::data::FashionBench(dir, absl::GetFlag(FLAGS_fashion_mnist));
  if (want("jpeg")) hvx::data::JpegBench(dir, absl::GetFlag(FLAGS_jpeg_records));
  return 0;
}
