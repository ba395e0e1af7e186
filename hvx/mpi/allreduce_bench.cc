// Allreduce benchmark: hvx against raw MPI on the same buffers, in the same process.
//
//   bazel build //hvx/mpi:allreduce_bench
//   mpiexec -n 2 bazel-bin/hvx/mpi/allreduce_bench
//
// (a) one 64 MiB float32 allreduce; (b) ResNet-50's 161 gradient tensors (25,557,032 float32)
// submitted together then waited, against one MPI_Allreduce per tensor and against one pre-packed
// MPI_Allreduce including pack/unpack; (c) a 4-byte allreduce, waited, repeated (latency).
// Raw MPI runs before hvx::Init so that no background thread competes with it. Rank 0 prints
// medians and ratios (raw / hvx: > 1 means hvx is faster). Over 700 lines in one file because its
// figures are ratios within one run: every plane, the engine, raw MPI, the bound model and the
// machine's placement line are measured in the same process and interleaved rounds.
#include <mpi.h>
#include <sys/mman.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "hvx/common/clock.h"
#include "hvx/common/cluster.h"
#include "hvx/common/env.h"
#include "hvx/common/flight_ring.h"
#include "hvx/common/memory.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/kernels/cpu_ops.h"
#include "hvx/mpi/mpi_collectives.h"
#include "hvx/mpi/mpi_transport.h"
#include "hvx/shm/cpu_plane.h"
#include "hvx/shm/plane_trial.h"

namespace {

int g_rank = 0;

// Median wall time of `reps` runs of fn in milliseconds, after one warm-up, synchronised by a
// barrier before each run.
// Minor page faults per run of the last MedianMs call (this process), the cost that dominates
// large buffers on the VMs this project runs on.
double g_faults = 0;

long MinorFaults() { return hvx::MinorPageFaults(hvx::FaultScope::kThisProcess); }

// The middle element of `v` sorted (the upper one of an even count).
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double MedianMs(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  const long faults = MinorFaults();
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const absl::Time start = hvx::MonotonicNow();
    fn();
    t.push_back(absl::ToDoubleMilliseconds(hvx::MonotonicNow() - start));
  }
  g_faults = static_cast<double>(MinorFaults() - faults) / reps;
  double med = Median(t);
  // Report the slowest rank's median: the job waits for it.
  MPI_Allreduce(MPI_IN_PLACE, &med, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return med;
}

// One line per measurement, printed by rank 0 at the end: median ms and page faults per run.
std::vector<std::string> g_lines;

double Measure(const std::string& what, int reps, const std::function<void()>& fn,
               int ops_per_run = 1) {
  const double ms = MedianMs(reps, fn) / ops_per_run;
  g_lines.push_back(
      absl::StrFormat("%-62s %9.3f ms %9.0f faults", what, ms, g_faults / ops_per_run));
  return ms;
}

void Ratio(const std::string& what, double raw, double hvx) {
  g_lines.push_back(absl::StrFormat("%-62s %9.2fx", what, raw / hvx));
}

// Ways of doing the same work, run in interleaved rounds so that load changes hit all of them
// alike; each run is timed from a barrier, and the slowest rank's time counts.
struct Variant {
  std::string name;
  std::function<void()> fn;
  bool second_thread = true;  // as hvx's background thread would run it
  std::vector<double> ms;     // one per round, in round order
  long faults = 0;
  double median() const { return Median(ms); }
};

// Runs every variant once per round, `reps` rounds, and adds each one's median line. With `probe`,
// calls it before each round and keeps what it returns in `probed`.
void RunInterleaved(const std::string& label, std::vector<Variant>& variants, int reps,
                    const std::function<double()>& probe = nullptr,
                    std::vector<double>* probed = nullptr) {
  for (int round = 0; round < reps; ++round) {
    if (probe) probed->push_back(probe());
    for (Variant& v : variants) {
      MPI_Barrier(MPI_COMM_WORLD);
      const absl::Time start = hvx::MonotonicNow();
      const long f0 = MinorFaults();
      if (v.second_thread) {
        std::thread t(v.fn);
        t.join();
      } else {
        v.fn();
      }
      v.faults += MinorFaults() - f0;
      double ms = absl::ToDoubleMilliseconds(hvx::MonotonicNow() - start);
      MPI_Allreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      v.ms.push_back(ms);
    }
  }
  for (const Variant& v : variants) {
    g_lines.push_back(
        absl::StrFormat("    %s: %-40s %9.3f ms (min %.3f) %6ld faults", label, v.name, v.median(),
                        *std::min_element(v.ms.begin(), v.ms.end()), v.faults / reps));
  }
}

// The shapes of torchvision ResNet-50's parameters, in order: 161 tensors, 25,557,032 elements.
std::vector<int64_t> ResNet50Sizes() {
  std::vector<int64_t> s = {64 * 3 * 7 * 7, 64, 64};
  const int blocks[4] = {3, 4, 6, 3};
  int64_t in = 64;
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t planes = int64_t{64} << layer;
    for (int b = 0; b < blocks[layer]; ++b) {
      s.insert(s.end(), {planes * in, planes, planes, planes * planes * 9, planes, planes,
                         planes * 4 * planes, planes * 4, planes * 4});
      if (b == 0) s.insert(s.end(), {planes * 4 * in, planes * 4, planes * 4});
      in = planes * 4;
    }
  }
  s.insert(s.end(), {1000 * 2048, 1000});
  return s;
}

// A strategy hvx does not use, measured by --compare: MPI_Allreduce on each span in place, in
// pieces of at most `piece_bytes`, with up to `inflight` pieces outstanding (MPI_Iallreduce when
// above 1); each piece is multiplied by `postscale` as soon as it completes, while still in cache.
// It moves the same bytes as one MPI_Allreduce per tensor, and the pieces stay small enough that
// MPICH's internal temporaries are reused heap memory rather than fresh pages.
absl::Status PiecewiseAllreduce(MPI_Comm comm, const std::vector<hvx::Span>& spans,
                                hvx::DataType dtype, hvx::ReduceOp op, double postscale,
                                int64_t piece_bytes, int inflight) {
  const hvx::MpiReduceType t = hvx::MpiOps::Get().For(dtype, op);
  const int64_t esize = static_cast<int64_t>(hvx::DataTypeSize(dtype));
  const int64_t per = std::max<int64_t>(1, std::min<int64_t>(piece_bytes, INT_MAX) / esize);
  inflight = std::max(1, inflight);
  // Outstanding pieces, completed in issue order so that memory is touched front to back.
  struct Piece {
    char* data;
    int64_t count;
  };
  std::vector<MPI_Request> requests;
  std::vector<Piece> pieces;
  size_t first = 0;
  auto finish_one = [&]() -> absl::Status {
    HVX_RETURN_IF_ERROR(
        hvx::MpiStatus(MPI_Wait(&requests[first], MPI_STATUS_IGNORE), "MPI_Iallreduce (wait)"));
    hvx::ScaleInPlace(dtype, pieces[first].data, pieces[first].count, postscale);
    ++first;
    return absl::OkStatus();
  };
  for (const hvx::Span& sp : spans) {
    for (int64_t done = 0; done < sp.count; done += per) {
      const int n = static_cast<int>(std::min(per, sp.count - done));
      char* p = sp.data + done * esize;
      if (inflight == 1) {
        HVX_RETURN_IF_ERROR(
            hvx::MpiStatus(MPI_Allreduce(MPI_IN_PLACE, p, n, t.type, t.op, comm), "MPI_Allreduce"));
        hvx::ScaleInPlace(dtype, p, n, postscale);
        continue;
      }
      if (requests.size() - first >= static_cast<size_t>(inflight))
        HVX_RETURN_IF_ERROR(finish_one());
      requests.emplace_back();
      pieces.push_back(Piece{p, n});
      HVX_RETURN_IF_ERROR(
          hvx::MpiStatus(MPI_Iallreduce(MPI_IN_PLACE, p, n, t.type, t.op, comm, &requests.back()),
                         "MPI_Iallreduce"));
    }
  }
  while (first < requests.size()) HVX_RETURN_IF_ERROR(finish_one());
  return absl::OkStatus();
}

// The machine's own speed, measured on every rank at once (as the ranks of an allreduce run):
// median ms for one pre-touched `bytes` memcpy and for y += x over `bytes` of float32.
// The work a staged shared-memory allreduce of `b` bytes over `n` ranks of one host cannot avoid:
// each rank copies its (n-1)/n share in and the others' results out, and folds n-1 peers' values
// into its 1/n.
double BoundCopiedBytes(int64_t b, int n) { return (n - 1.0) / n * 2.0 * static_cast<double>(b); }
double BoundAddedBytes(int64_t b, int n) { return (n - 1.0) / n * static_cast<double>(b); }

struct MachineSpeed {
  double copy_ms;
  double add_ms;
  int64_t bytes;
  // The least time that work can take at these speeds.
  double BoundMs(int64_t b, int n) const {
    return (BoundCopiedBytes(b, n) * copy_ms + BoundAddedBytes(b, n) * add_ms) /
           static_cast<double>(bytes);
  }
};

MachineSpeed MeasureMachine(int reps) {
  const int64_t n = int64_t{16} << 20;  // 64 MiB of float32
  std::vector<float> x(n, 1.0f), y(n, 2.0f);
  MachineSpeed speed;
  speed.bytes = n * 4;
  speed.copy_ms = MedianMs(reps, [&] { std::memcpy(y.data(), x.data(), n * 4); });
  speed.add_ms = MedianMs(reps, [&] {
    hvx::ReduceInto(hvx::DataType::kFloat32, hvx::ReduceOp::kSum, y.data(), x.data(), n);
  });
  return speed;
}

// The bracketed choice of a transparent-huge-page setting ("madvise"), or "?" where unreadable.
std::string ThpSetting(const std::string& file) {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/" + file);
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos
             ? "?"
             : line.substr(open + 1, close - open - 1);
}

// What makes a VM's copies slow or fast, measured on every rank at once: the first touch of fresh
// 4 KiB pages (what a fresh buffer per call pays; raw MPI_Allreduce does), and a pre-touched
// 64 MiB copy on 4 KiB pages against one on huge pages (what TLB reach costs the plane's copies).
std::string MemoryLine(int reps) {
  const size_t bytes = size_t{64} << 20;
  const size_t pages = bytes / 4096;
  const double first_touch = MedianMs(reps, [&] {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    std::memset(p, 1, bytes);
    munmap(p, bytes);
  });
  std::vector<char> small_src(bytes, 1), small_dst(bytes, 2);
  const double small =
      MedianMs(reps, [&] { std::memcpy(small_dst.data(), small_src.data(), bytes); });
  char* huge_src = hvx::MapHugePages(bytes);
  char* huge_dst = hvx::MapHugePages(bytes);
  double huge = -1;
  if (huge_src != nullptr && huge_dst != nullptr) {
    std::memset(huge_src, 1, bytes);
    std::memset(huge_dst, 2, bytes);
    huge = MedianMs(reps, [&] { std::memcpy(huge_dst, huge_src, bytes); });
  }
  if (huge_src != nullptr) munmap(huge_src, hvx::RoundUpToHugePages(bytes));
  if (huge_dst != nullptr) munmap(huge_dst, hvx::RoundUpToHugePages(bytes));
  return absl::StrFormat(
      "memory: first touch %.2f us per 4 KiB page (64 MiB fresh: %.3f ms); memcpy 64 MiB on 4 KiB "
      "pages %.3f ms, on huge pages %.3f ms; THP enabled [%s], shmem_enabled [%s]",
      1e3 * first_touch / pages, first_touch, small, huge, ThpSetting("enabled"),
      ThpSetting("shmem_enabled"));
}

// How far apart the cores of ranks 0 and 1 are: the round trip of one cache line between them
// (each rank writes a word the other spins on), in ns. Where they share a cache it is ~100 ns; on
// cores that share none, several times that, and so is every line one reads that the other just
// wrote. A VM's vCPUs can move between the two within a run, so the planes' cases measure it
// before every round (ByCoreDistance). -1 with fewer than two ranks on rank 0's host.
class LineRoundTrip {
 public:
  LineRoundTrip() {
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_);
    MPI_Comm_rank(node_, &local_);
    MPI_Comm_size(node_, &local_size_);
    MPI_Win_allocate_shared(local_ == 0 ? 2 * kLine : 0, 1, MPI_INFO_NULL, node_, &base_, &win_);
    MPI_Aint bytes = 0;
    int unit = 1;
    MPI_Win_shared_query(win_, 0, &bytes, &unit, &base_);
    if (local_ == 0) std::memset(base_, 0, 2 * kLine);
    MPI_Barrier(node_);
  }
  ~LineRoundTrip() {
    MPI_Win_free(&win_);
    MPI_Comm_free(&node_);
  }

  // Collective over MPI_COMM_WORLD; every rank returns rank 0's figure.
  double Ns(int trips = 5000) {
    double ns = -1;
    MPI_Barrier(MPI_COMM_WORLD);
    if (local_size_ >= 2 && local_ < 2) {
      int64_t* mine = reinterpret_cast<int64_t*>(base_ + local_ * kLine);
      int64_t* theirs = reinterpret_cast<int64_t*>(base_ + (1 - local_) * kLine);
      const absl::Time start = hvx::MonotonicNow();
      for (int i = 1; i <= trips; ++i) {
        const int64_t want = next_ + i;
        // Rank 0 serves, rank 1 answers.
        if (local_ == 0) __atomic_store_n(mine, want, __ATOMIC_RELEASE);
        while (__atomic_load_n(theirs, __ATOMIC_ACQUIRE) != want) {
        }
        if (local_ == 1) __atomic_store_n(mine, want, __ATOMIC_RELEASE);
      }
      ns = absl::ToDoubleNanoseconds(hvx::MonotonicNow() - start) / trips;
    }
    next_ += trips;
    MPI_Bcast(&ns, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return ns;
  }

 private:
  static constexpr MPI_Aint kLine = 128;  // apart by more than a line and its prefetched pair
  MPI_Comm node_;
  MPI_Win win_;
  char* base_ = nullptr;
  int local_ = 0;
  int local_size_ = 1;
  int64_t next_ = 0;
};

// The plane's time over the bound's, round by round, in two groups by the cache line's round
// trip measured before the round: ranks on cores that share a cache (under 250 ns) and on cores
// that share none. Each group: its rounds, their round trips, the median ratio and the medians of
// the plane's and the bound's times.
std::string ByCoreDistance(const std::string& name, const std::vector<double>& line_ns,
                           const Variant& plane, const Variant& bound) {
  std::string out = absl::StrFormat("%s, shm plane / bound by where the ranks ran:", name);
  if (line_ns.empty() || line_ns[0] < 0) return out + " one rank on rank 0's host";
  for (const bool near : {true, false}) {
    std::vector<double> ratios, ns, plane_ms, bound_ms;
    for (size_t r = 0; r < line_ns.size(); ++r) {
      if ((line_ns[r] < 250) != near) continue;
      ratios.push_back(plane.ms[r] / bound.ms[r]);
      ns.push_back(line_ns[r]);
      plane_ms.push_back(plane.ms[r]);
      bound_ms.push_back(bound.ms[r]);
    }
    out += near ? " cores sharing a cache: " : "; cores sharing none: ";
    if (ratios.empty()) {
      out += "no round";
      continue;
    }
    out += absl::StrFormat(
        "%zu rounds (line round trip %.0f-%.0f ns), median %.2fx (plane %.3f ms, bound %.3f ms)",
        ratios.size(), *std::min_element(ns.begin(), ns.end()),
        *std::max_element(ns.begin(), ns.end()), Median(ratios), Median(plane_ms),
        Median(bound_ms));
  }
  return out;
}

// The shm plane's regions in this process (its own and its peers' mappings of /dev/shm/hvx.*):
// MiB mapped and MiB of it on huge pages, from /proc/self/smaps.
std::string RegionPagesLine() {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool region = false;
  int64_t rss_kb = 0, huge_kb = 0;
  while (std::getline(in, line)) {
    // A mapping's first line starts with its address range ("7f..-7f.. rw-s ..."); its fields'
    // lines with a name and a colon ("Rss: 4 kB").
    const std::string first = line.substr(0, line.find(' '));
    if (first.find('-') != std::string::npos &&
        first.find_first_not_of("0123456789abcdef-") == std::string::npos) {
      region = line.find("/dev/shm/hvx.") != std::string::npos;
      continue;
    }
    if (!region) continue;
    long kb = 0;
    if (std::sscanf(line.c_str(), "Rss: %ld kB", &kb) == 1) rss_kb += kb;
    if (std::sscanf(line.c_str(), "ShmemPmdMapped: %ld kB", &kb) == 1) huge_kb += kb;
    if (std::sscanf(line.c_str(), "FilePmdMapped: %ld kB", &kb) == 1) huge_kb += kb;
  }
  return absl::StrFormat(
      "shm plane regions in rank 0: %lld MiB resident, %lld MiB of it on huge pages",
      static_cast<long long>(rss_kb >> 10), static_cast<long long>(huge_kb >> 10));
}

class NoActivity : public hvx::ActivityRecorder {
 public:
  void Start(absl::string_view) override {}
  void End() override {}
};

// One CPU data plane of a communicator of its own (MPI_COMM_WORLD's ranks).
struct Plane {
  std::unique_ptr<hvx::InitOptions> options;  // the shm plane's, outliving it
  std::unique_ptr<hvx::Communicator> comm;
  std::unique_ptr<hvx::DataPlane> shm;  // null: the communicator's own (MPI's)
  std::unique_ptr<hvx::HostVote> vote;  // null: the communicator's BitwiseAnd
  absl::Status Allreduce(std::vector<hvx::TensorRef> tensors, double postscale) {
    hvx::AllreduceWork w;
    for (size_t i = 0; i < tensors.size(); ++i) w.names.push_back(absl::StrCat("t", i));
    w.inputs = tensors;
    w.outputs = tensors;
    w.op = hvx::ReduceOp::kSum;
    w.postscale_factor = postscale;
    w.fusion_buffer_bytes = int64_t{128} << 20;
    static NoActivity none;
    w.activity = &none;
    return (shm ? *shm : comm->cpu()).Allreduce(w);
  }
  absl::Status Vote(std::vector<uint64_t>* words) {
    return vote && words->size() <= vote->MaxWords() ? vote->And(words) : comm->BitwiseAnd(words);
  }
};

// The CPU plane HVX_CPU_PLANE=`name` gives the engine ("mpi", "shm", "auto"), made as it makes it.
Plane MakePlane(const std::string& name) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  Plane p{std::make_unique<hvx::InitOptions>(), hvx::MakeMpiCommunicator(dup)};
  p.options->cpu_plane = name;
  if (name == "mpi") return p;
  hvx::DataPlaneContext ctx;
  ctx.comm = p.comm.get();
  for (int r = 0; r < p.comm->size(); ++r) ctx.global_ranks.push_back(r);
  std::vector<std::string> identities;
  (void)p.comm->Allgather(hvx::HostIdentity(hvx::HostName()), &identities);
  ctx.hosts = hvx::HostNamesOf(identities);
  ctx.global_rank = p.comm->rank();
  ctx.options = p.options.get();
  p.shm = *hvx::MakeShmCpuPlane(ctx, &p.comm->cpu());
  p.vote = *hvx::MakeShmHostVote(ctx);
  return p;
}

// The buffers every section reduces, shared by raw MPI and hvx; touched once up front like a
// training job's gradients.
struct Buffers {
  std::vector<float> big = std::vector<float>(int64_t{16} << 20, 1.0f);  // (a) 64 MiB
  std::vector<int64_t> sizes = ResNet50Sizes();
  int64_t total = 0;                      // elements in the ResNet-50 set
  std::vector<std::vector<float>> grads;  // (b) the set, one vector per tensor
  std::vector<float> packed;              // (b) the set packed into one buffer
  std::vector<hvx::Span> set_spans;       // the set as spans in place, for the bare ring runs
  float tiny = 1.0f;                      // (c)

  Buffers() {
    for (int64_t n : sizes) {
      total += n;
      grads.emplace_back(n, 1.0f);
    }
    packed.assign(total, 0.0f);
    for (auto& g : grads)
      set_spans.push_back(
          hvx::Span{reinterpret_cast<char*>(g.data()), static_cast<int64_t>(g.size())});
  }

  // One MPI_Allreduce per tensor of the set, in place: what a framework without fusion does.
  void PerTensor() {
    for (auto& g : grads) {
      MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    }
  }
};

struct Settings {
  int reps = 9;          // runs per large measurement
  int tiny_reps = 2000;  // ops per latency run
  bool quick = false;    // skip the diagnostics
  bool compare = false;  // measure the strategies hvx does not use
};

// Raw MPI against both CPU planes, interleaved, each against the machine's copy-and-add bound.
void ComparePlanes(Buffers& b, const MachineSpeed& speed, int size, const Settings& s) {
  Plane mpi = MakePlane("mpi");
  Plane shm = MakePlane("shm");
  // HVX_CPU_PLANE=auto, the default: on two ranks it times both planes on its first buffers of
  // each size class and keeps the faster (its figures in rank 0's log); measured after that.
  Plane automatic = MakePlane("auto");
  std::vector<hvx::TensorRef> big_ref = {
      hvx::TensorRef(hvx::DataType::kFloat32, {static_cast<int64_t>(b.big.size())}, b.big.data())};
  std::vector<hvx::TensorRef> set_ref;
  for (auto& g : b.grads) {
    set_ref.push_back(
        hvx::TensorRef(hvx::DataType::kFloat32, {static_cast<int64_t>(g.size())}, g.data()));
  }
  std::vector<hvx::TensorRef> tiny_ref = {hvx::TensorRef(hvx::DataType::kFloat32, {1}, &b.tiny)};
  const int64_t big_bytes = static_cast<int64_t>(b.big.size()) * 4, set_bytes = b.total * 4;
  // The bound's own work, timed in the same rounds as the planes (a VM's copy speed drifts within
  // a run): BoundCopiedBytes copied and BoundAddedBytes added over pre-touched 64 MiB buffers.
  std::vector<float> bound_x(int64_t{16} << 20, 1.0f), bound_y(int64_t{16} << 20, 2.0f);
  const auto bound_work = [&](int64_t bytes) {
    const int64_t limit = static_cast<int64_t>(bound_x.size()) * 4;
    for (int64_t left = static_cast<int64_t>(BoundCopiedBytes(bytes, size)); left > 0;
         left -= limit)
      std::memcpy(bound_y.data(), bound_x.data(), std::min(left, limit));
    for (int64_t left = static_cast<int64_t>(BoundAddedBytes(bytes, size)) / 4; left > 0;
         left -= limit / 4)
      hvx::ReduceInto(hvx::DataType::kFloat32, hvx::ReduceOp::kSum, bound_y.data(), bound_x.data(),
                      std::min(left, limit / 4));
  };
  struct Case {
    std::string name;
    int64_t bytes;
    std::vector<Variant> variants;
    int ops = 1;
  };
  std::vector<Case> cases;
  cases.push_back(
      {"(a) 64 MiB",
       big_bytes,
       {{"raw MPI_Allreduce",
         [&] {
           MPI_Allreduce(MPI_IN_PLACE, b.big.data(), static_cast<int>(b.big.size()), MPI_FLOAT,
                         MPI_SUM, MPI_COMM_WORLD);
         },
         false},
        {"MPI plane", [&] { (void)mpi.Allreduce(big_ref, 1.0); }},
        {"shm plane", [&] { (void)shm.Allreduce(big_ref, 1.0); }},
        {"bound: its copies and adds alone", [&] { bound_work(big_bytes); }},
        {"auto plane, after its trial", [&] { (void)automatic.Allreduce(big_ref, 1.0); }}}});
  cases.push_back(
      {"(b) ResNet-50 set",
       set_bytes,
       {{"raw MPI, one MPI_Allreduce per tensor", [&] { b.PerTensor(); }, false},
        {"MPI plane, fused", [&] { (void)mpi.Allreduce(set_ref, 0.5); }},
        {"shm plane, fused", [&] { (void)shm.Allreduce(set_ref, 0.5); }},
        {"bound: its copies and adds alone", [&] { bound_work(set_bytes); }},
        {"auto plane, fused, after its trial", [&] { (void)automatic.Allreduce(set_ref, 0.5); }}}});
  const int tiny_ops = std::max(1, s.tiny_reps / 4);
  cases.push_back({"(c) 4 B",
                   4,
                   {{"raw MPI_Allreduce",
                     [&] {
                       for (int i = 0; i < tiny_ops; ++i)
                         MPI_Allreduce(MPI_IN_PLACE, &b.tiny, 1, MPI_FLOAT, MPI_SUM,
                                       MPI_COMM_WORLD);
                     },
                     false},
                    {"MPI plane",
                     [&] {
                       for (int i = 0; i < tiny_ops; ++i) (void)mpi.Allreduce(tiny_ref, 1.0);
                     },
                     false},
                    {"shm plane",
                     [&] {
                       for (int i = 0; i < tiny_ops; ++i) (void)shm.Allreduce(tiny_ref, 1.0);
                     },
                     false},
                    {"auto plane, after its trial",
                     [&] {
                       for (int i = 0; i < tiny_ops; ++i) (void)automatic.Allreduce(tiny_ref, 1.0);
                     },
                     false}},
                   tiny_ops});
  // The auto plane's trial on each case's buffers (every rank runs the same ones), before timing.
  for (int i = 0; i < 2 * hvx::shm::PlaneTrial::kSamples; ++i) {
    (void)automatic.Allreduce(big_ref, 1.0);
    (void)automatic.Allreduce(set_ref, 0.5);
    (void)automatic.Allreduce(tiny_ref, 1.0);
  }
  bool regions_reported = false;
  LineRoundTrip line;
  for (Case& k : cases) {
    for (Variant& v : k.variants) v.fn();  // warm-up: the shm plane maps its regions here
    if (!regions_reported) {
      g_lines.push_back(RegionPagesLine());
      regions_reported = true;
    }
    std::vector<double> line_ns;
    RunInterleaved(
        k.name, k.variants, s.reps, [&] { return line.Ns(); }, &line_ns);
    const double raw = k.variants[0].median() / k.ops;
    const double mpi_ms = k.variants[1].median() / k.ops;
    const double shm_ms = k.variants[2].median() / k.ops;
    // The auto plane is the last variant of every case.
    const double auto_ms = k.variants.back().median() / k.ops;
    g_lines.push_back(absl::StrFormat(
        "%s: auto plane after its trial %.4f ms, %.2fx the faster plane's (%s) in the same rounds",
        k.name, auto_ms, auto_ms / std::min(mpi_ms, shm_ms), shm_ms <= mpi_ms ? "shm" : "MPI"));
    if (k.bytes > 4) {
      // Measured in these rounds; the machine line's speed gives the same figure when the VM
      // holds still.
      const double bound = k.variants[3].median();
      g_lines.push_back(absl::StrFormat(
          "%s: bound %.3f ms (%.3f ms from the machine line); shm plane %.2fx the bound, MPI "
          "plane %.2fx; shm %.2fx faster than %s, %.2fx faster than the MPI plane",
          k.name, bound, speed.BoundMs(k.bytes, size), shm_ms / bound, mpi_ms / bound, raw / shm_ms,
          k.variants[0].name, mpi_ms / shm_ms));
      g_lines.push_back(ByCoreDistance(k.name, line_ns, k.variants[2], k.variants[3]));
    } else {
      g_lines.push_back(
          absl::StrFormat("%s per op: raw MPI %.4f ms, MPI plane %.4f ms, shm plane %.4f ms",
                          k.name, raw, mpi_ms, shm_ms));
    }
  }
}

// What a 4 B allreduce through the engine is made of, each part measured alone on every rank at
// once, in us: the caller's Enqueue wakes the engine thread and the completion wakes the caller
// (both a std::condition_variable), the engine's cache vote among the ranks, and the 4 B
// allreduce on the CPU plane. What the engine's (c) takes beyond their sum is its own work.
struct LatencyParts {
  double handoffs = 0;  // one round trip between two threads
  double vote = 0;      // Communicator::BitwiseAnd of a default cache's 33 words
  double allreduce = 0;
};

LatencyParts MeasureLatencyParts(const Settings& s) {
  const int ops = std::max(1, s.tiny_reps);
  // Median us per call of `op`, run `ops` times a rep.
  const auto per_op_us = [&](const std::function<void()>& op) {
    return 1e3 *
           MedianMs(std::min(s.reps, 5),
                    [&] {
                      for (int i = 0; i < ops; ++i) op();
                    }) /
           ops;
  };
  LatencyParts parts;
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;  // 1: the peer thread's turn; 2: stop
  std::thread peer([&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return turn != 0; });
      if (turn == 2) return;
      turn = 0;
      cv.notify_all();
    }
  });
  parts.handoffs = per_op_us([&] {
    std::unique_lock<std::mutex> lock(mu);
    turn = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return turn == 0; });
  });
  {
    std::lock_guard<std::mutex> lock(mu);
    turn = 2;
    cv.notify_all();
  }
  peer.join();
  Plane plane = MakePlane("auto");
  std::vector<uint64_t> words(33, ~uint64_t{0});
  parts.vote = per_op_us([&] { (void)plane.Vote(&words); });
  float tiny = 1.0f;
  std::vector<hvx::TensorRef> tiny_ref = {hvx::TensorRef(hvx::DataType::kFloat32, {1}, &tiny)};
  parts.allreduce = per_op_us([&] { (void)plane.Allreduce(tiny_ref, 1.0); });
  return parts;
}

// Median ms of (a), (b) and (c), measured one way: raw MPI or hvx.
struct Result {
  double big = 0;
  double set = 0;
  double set_packed = 0;  // raw MPI only: the set pre-packed into one buffer
  double tiny = 0;
};

// The raw MPI baselines, on the main thread before hvx exists.
Result MeasureRawMpi(Buffers& b, const Settings& s) {
  Result r;
  r.big = Measure("(a) raw MPI_Allreduce 64 MiB", s.reps, [&] {
    MPI_Allreduce(MPI_IN_PLACE, b.big.data(), static_cast<int>(b.big.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  });
  r.set = Measure("(b) raw MPI, one MPI_Allreduce per tensor", s.reps, [&] { b.PerTensor(); });
  r.set_packed = Measure("(b) raw MPI, pre-packed one MPI_Allreduce + pack/unpack", s.reps, [&] {
    float* p = b.packed.data();
    for (auto& g : b.grads) {
      std::memcpy(p, g.data(), g.size() * 4);
      p += g.size();
    }
    MPI_Allreduce(MPI_IN_PLACE, b.packed.data(), static_cast<int>(b.total), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    p = b.packed.data();
    for (auto& g : b.grads) {
      std::memcpy(g.data(), p, g.size() * 4);
      p += g.size();
    }
  });
  r.tiny = Measure(
      "(c) raw MPI_Allreduce 4 B, per op", std::min(s.reps, 5),
      [&] {
        for (int i = 0; i < s.tiny_reps; ++i)
          MPI_Allreduce(MPI_IN_PLACE, &b.tiny, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      },
      s.tiny_reps);
  return r;
}

// Where the time of a large allreduce goes (skipped with --quick).
void Diagnose(Buffers& b, const Settings& s) {
  const int reps = std::min(s.reps, 5);
  // Why hvx does not call MPI_Allreduce on large buffers: from a thread other than main (hvx's
  // background thread), MPICH's per-call temporaries come back as fresh pages every call.
  Measure("    raw per-tensor set, issued from a second thread", reps, [&] {
    std::thread t([&] { b.PerTensor(); });
    t.join();
  });
  hvx::HostBuffer scratch;
  for (int64_t c : {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20}) {
    Measure(absl::StrCat("    ring allreduce 64 MiB, second thread, pieces of ", c >> 20, " MiB"),
            reps, [&] {
              std::thread t([&] {
                (void)hvx::RingAllreduce(
                    MPI_COMM_WORLD, b.big.data(), static_cast<int64_t>(b.big.size()),
                    hvx::DataType::kFloat32, hvx::ReduceOp::kSum, 1.0, c, &scratch);
              });
              t.join();
            });
  }

  // The ResNet-50 set through the ring, as one call over all tensors in place (what hvx runs for
  // a fused response) and as one call per tensor.
  Measure("    ring over the ResNet-50 set in place, one call, second thread", reps, [&] {
    std::thread t([&] {
      (void)hvx::RingAllreduce(MPI_COMM_WORLD, b.set_spans, hvx::DataType::kFloat32,
                               hvx::ReduceOp::kSum, 0.5, hvx::kRingPieceBytes, &scratch);
    });
    t.join();
  });
  Measure("    ring per ResNet-50 tensor, second thread", reps, [&] {
    std::thread t([&] {
      for (auto& g : b.grads) {
        (void)hvx::Allreduce(MPI_COMM_WORLD, g.data(), static_cast<int64_t>(g.size()),
                             hvx::DataType::kFloat32, hvx::ReduceOp::kSum, 0.5, &scratch);
      }
    });
    t.join();
  });

  for (int64_t c : {int64_t{1} << 20, int64_t{4} << 20}) {
    Measure(absl::StrCat("    MPI_Allreduce per tensor in ", c >> 20, " MiB pieces, second thread"),
            reps, [&] {
              std::thread t([&] {
                for (auto& g : b.grads) {
                  (void)hvx::ChunkedAllreduce(MPI_COMM_WORLD, g.data(),
                                              static_cast<int64_t>(g.size()),
                                              hvx::DataType::kFloat32, hvx::ReduceOp::kSum, c);
                }
              });
              t.join();
            });
    Measure(absl::StrCat("    MPI_Allreduce 64 MiB in ", c >> 20, " MiB pieces, second thread"),
            reps, [&] {
              std::thread t([&] {
                (void)hvx::ChunkedAllreduce(MPI_COMM_WORLD, b.big.data(),
                                            static_cast<int64_t>(b.big.size()),
                                            hvx::DataType::kFloat32, hvx::ReduceOp::kSum, c);
              });
              t.join();
            });
  }
}

// --compare: execution strategies for one fused response holding the whole ResNet-50 set
// (average), each from a second thread as in hvx, interleaved so that load changes hit all of them
// alike.
void CompareSetStrategies(Buffers& b, const Settings& s) {
  hvx::HostBuffer scratch;
  std::vector<Variant> variants;
  variants.push_back({"raw per tensor (sum, no scale)", [&] { b.PerTensor(); }});
  for (int64_t kib : {16384, 4096, 1024, 256}) {
    variants.push_back({absl::StrCat("ring ", kib, " KiB pieces"), [&, kib] {
                          (void)hvx::RingAllreduce(MPI_COMM_WORLD, b.set_spans,
                                                   hvx::DataType::kFloat32, hvx::ReduceOp::kSum,
                                                   0.5, kib << 10, &scratch);
                        }});
  }
  for (int64_t piece : {int64_t{1} << 20, int64_t{4} << 20}) {
    for (int inflight : {1, 4}) {
      variants.push_back(
          {absl::StrCat("piecewise ", piece >> 20, " MiB x", inflight), [&, piece, inflight] {
             (void)PiecewiseAllreduce(MPI_COMM_WORLD, b.set_spans, hvx::DataType::kFloat32,
                                      hvx::ReduceOp::kSum, 0.5, piece, inflight);
           }});
    }
  }
  RunInterleaved("set strategy", variants, s.reps);
}

// The same work through hvx (initialized here, shut down before returning); with --compare, what
// the engine adds to the bare ring.
// The flight recorder's own work for one op, in ns: its submission, negotiation, data-plane and
// done records in a ring of its own (hvx/common/flight_ring.h), names as long as a ResNet-50
// parameter's, the median of `reps` runs of 20000 ops.
double FlightRecorderNsPerOp(int reps) {
  std::vector<char> memory(hvx::FlightRingBytes());
  hvx::FlightRing ring;
  ring.Attach(memory.data(), memory.size());
  std::vector<std::string> names;
  for (int i = 0; i < 161; ++i) names.push_back(absl::StrCat("grad.layer3.", i, ".conv2.weight"));
  constexpr int kOps = 20000;
  uint64_t id = 0;
  std::vector<double> ns;
  for (int r = 0; r < std::max(3, reps); ++r) {
    const absl::Time start = hvx::MonotonicNow();
    for (int i = 0; i < kOps; ++i) {
      ++id;
      const int64_t now = hvx::FlightNowNs();
      const hvx::FlightRing::Ticket t =
          ring.Submitted({id, 0, "ALLREDUCE", "float32", 4096, names[id % names.size()], now});
      ring.Mark(t.slot, t.id, hvx::FlightState::kNegotiated, hvx::FlightNowNs());
      ring.Mark(t.slot, t.id, hvx::FlightState::kDataPlane, hvx::FlightNowNs(), "SHM_ALLREDUCE");
      ring.Finish(t.slot, t.id, 0, "", hvx::FlightNowNs());
    }
    ns.push_back(absl::ToDoubleNanoseconds(hvx::MonotonicNow() - start) / kOps);
  }
  return Median(ns);
}

// Straggler detection's own work for one op, in ns (hvx/core/straggler.h): the clock read when it
// is agreed and the wait clock's updates, with the cycle's drain and its clock read counted once
// per op (the most: one op per cycle); the median of `reps` runs of 20000 ops. The window's
// exchange, one small allgather each HVX_STRAGGLER_CHECK_S, is not in it.
double StragglerNsPerOp(int reps) {
  hvx::WaitClock clock;
  constexpr int kOps = 20000;
  std::vector<double> ns;
  const absl::Time submitted = hvx::MonotonicNow();
  for (int r = 0; r < std::max(3, reps); ++r) {
    const absl::Time start = hvx::MonotonicNow();
    for (int i = 0; i < kOps; ++i) {
      clock.Submitted(submitted);
      clock.Agreed(submitted, hvx::MonotonicNow());
      clock.Drained(hvx::MonotonicNow());
    }
    ns.push_back(absl::ToDoubleNanoseconds(hvx::MonotonicNow() - start) / kOps);
    clock.TakeWindow(hvx::MonotonicNow());
  }
  return Median(ns);
}

Result MeasureHvx(Buffers& b, const Settings& s) {
  // The default environment: knobs only if the user set HVX_* variables.
  auto options = hvx::InitOptions::FromEnv(hvx::Environment::Process());
  if (!options.ok() || !hvx::Init(*options).ok()) {
    std::fprintf(stderr, "hvx::Init failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Result r;
  hvx::AllreduceOptions sum;
  sum.op = hvx::ReduceOp::kSum;
  r.big = Measure("(a) hvx Allreduce 64 MiB", s.reps, [&] {
    hvx::TensorRef t(hvx::DataType::kFloat32, {static_cast<int64_t>(b.big.size())}, b.big.data());
    (void)hvx::Wait(hvx::Allreduce("big", t, t, sum));
  });
  hvx::AllreduceOptions avg;  // the DistributedOptimizer pattern: averaged, one handle per tensor
  auto set_through_hvx = [&] {
    std::vector<hvx::Handle> handles;
    for (size_t i = 0; i < b.grads.size(); ++i) {
      hvx::TensorRef t(hvx::DataType::kFloat32, {static_cast<int64_t>(b.grads[i].size())},
                       b.grads[i].data());
      handles.push_back(hvx::Allreduce(absl::StrCat("grad.", i), t, t, avg));
    }
    (void)hvx::WaitAll(handles);
  };
  r.set = Measure("(b) hvx, 161 async Allreduce (average), then wait", s.reps, set_through_hvx);
  if (s.compare) {
    // The same set through hvx (main thread, as a training loop calls it) and through
    // RingAllreduce directly (second thread), interleaved.
    hvx::HostBuffer scratch;
    std::vector<Variant> variants;
    variants.push_back({"hvx, 161 async Allreduce (average)", set_through_hvx, false});
    variants.push_back({"bare RingAllreduce, default pieces", [&] {
                          (void)hvx::RingAllreduce(MPI_COMM_WORLD, b.set_spans,
                                                   hvx::DataType::kFloat32, hvx::ReduceOp::kSum,
                                                   0.5, hvx::kRingPieceBytes, &scratch);
                        }});
    variants.push_back({"raw MPI, one MPI_Allreduce per tensor", [&] { b.PerTensor(); }, false});
    RunInterleaved("engine", variants, s.reps);
  }
  r.tiny = Measure(
      "(c) hvx Allreduce 4 B + Wait, per op", std::min(s.reps, 5),
      [&] {
        hvx::TensorRef t(hvx::DataType::kFloat32, {1}, &b.tiny);
        for (int i = 0; i < s.tiny_reps; ++i) (void)hvx::Wait(hvx::Allreduce("tiny", t, t, sum));
      },
      s.tiny_reps);
  (void)hvx::Shutdown();
  return r;
}

// --reps=N (default 9) runs per large measurement, --tiny_reps=N (default 2000) ops per latency
// run. Oversubscribed runs (-n 4 on 2 cores) need small values: each op then costs scheduler
// slices.
Settings ParseSettings(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) s.reps = std::max(1, std::atoi(argv[i] + 7));
    if (std::strncmp(argv[i], "--tiny_reps=", 12) == 0)
      s.tiny_reps = std::max(1, std::atoi(argv[i] + 12));
    if (std::strcmp(argv[i], "--quick") == 0) s.quick = true;
    if (std::strcmp(argv[i], "--compare") == 0) s.compare = true;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Settings settings = ParseSettings(argc, argv);
  Buffers buffers;

  (void)hvx::MpiOps::Get().Init();
  const MachineSpeed speed = MeasureMachine(settings.reps);
  g_lines.push_back(absl::StrFormat(
      "machine, every rank at once: memcpy 64 MiB %.3f ms (%.1f GB/s), y += x 64 MiB %.3f ms",
      speed.copy_ms, speed.bytes / speed.copy_ms / 1e6, speed.add_ms));
  g_lines.push_back(MemoryLine(settings.reps));
  ComparePlanes(buffers, speed, size, settings);
  const LatencyParts parts = MeasureLatencyParts(settings);
  const Result raw = MeasureRawMpi(buffers, settings);
  if (!settings.quick) Diagnose(buffers, settings);
  if (settings.compare) CompareSetStrategies(buffers, settings);
  const double flight_ns = FlightRecorderNsPerOp(settings.reps);
  const double straggler_ns = StragglerNsPerOp(settings.reps);
  const Result hvx = MeasureHvx(buffers, settings);

  Ratio("(a) raw MPI / hvx", raw.big, hvx.big);
  Ratio("(b) per-tensor MPI / hvx", raw.set, hvx.set);
  Ratio("(b) pre-packed MPI / hvx", raw.set_packed, hvx.set);
  Ratio("(c) raw MPI / hvx", raw.tiny, hvx.tiny);
  const double engine_us = 1e3 * hvx.tiny;
  g_lines.push_back(absl::StrFormat(
      "(c) through the engine %.1f us: thread wake-ups (a round trip) %.1f us + the vote %.1f us + "
      "the CPU plane's 4 B allreduce %.1f us = %.1f us; the engine's own work the other %.1f us",
      engine_us, parts.handoffs, parts.vote, parts.allreduce,
      parts.handoffs + parts.vote + parts.allreduce,
      engine_us - parts.handoffs - parts.vote - parts.allreduce));
  // Under hvxrun the engine above recorded every op (the wrapper hands it the ring).
  const char* off = std::getenv("HVX_FLIGHT_RECORDER");
  const bool recorded =
      std::getenv(hvx::kFlightFdVariable) != nullptr &&
      !(off != nullptr && (std::strcmp(off, "0") == 0 || std::strcmp(off, "false") == 0));
  const double set_us = flight_ns * static_cast<double>(buffers.sizes.size()) / 1e3;
  g_lines.push_back(absl::StrFormat(
      "(f) the flight recorder's work per op %.0f ns: the ResNet-50 set's %zu ops %.1f us, %.3f%% "
      "of (b) through the engine; %.3f%% of (c)'s op (the engine %s)",
      flight_ns, buffers.sizes.size(), set_us, 100 * set_us / (1e3 * hvx.set),
      100 * flight_ns / (1e6 * hvx.tiny),
      recorded ? "recorded its ops: run under hvxrun" : "recorded nothing: not under hvxrun"));
  const double straggler_set_us = straggler_ns * static_cast<double>(buffers.sizes.size()) / 1e3;
  g_lines.push_back(absl::StrFormat(
      "(g) straggler detection's work per op %.0f ns: the ResNet-50 set's %zu ops %.1f us, %.3f%% "
      "of (b) through the engine; %.3f%% of (c)'s op",
      straggler_ns, buffers.sizes.size(), straggler_set_us,
      100 * straggler_set_us / (1e3 * hvx.set), 100 * straggler_ns / (1e6 * hvx.tiny)));
  if (g_rank == 0) {
    std::printf(
        "ranks %d; ResNet-50 set: %zu tensors, %lld elements; medians of the slowest rank\n", size,
        buffers.sizes.size(), static_cast<long long>(buffers.total));
    for (const std::string& l : g_lines) std::printf("%s\n", l.c_str());
  }
  MPI_Finalize();
  return 0;
}
