// Every op of hvx/core/api.h on two real ranks over MPICH: values for each dtype and reduce op,
// async fused submission, process sets, join, barrier, every disagreement reaching both ranks,
// the timeline file and the stall report.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/common/cluster.h"
#include "hvx/common/half.h"
#include "hvx/common/logging.h"
#include "hvx/core/api.h"

namespace hvx {
namespace {

std::string TimelinePath() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/hvx_collectives_timeline.json");
}

std::mutex g_log_mu;
std::string* g_log = new std::string();

class HvxEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    SetLogSinkForTest([](absl::string_view line) {
      std::lock_guard<std::mutex> lock(g_log_mu);
      g_log->append(line.data(), line.size());
      fwrite(line.data(), 1, line.size(), stderr);
    });
    InitOptions o = *InitOptions::FromEnv(hvx::Environment::Process());  // HVX_CPU_PLANE from BUILD
    o.timeline_path = TimelinePath();
    o.stall_check_time_s = 2;
    o.stall_shutdown_time_s = 4;
    ASSERT_TRUE(Init(o).ok());
  }
  // One rank's Shutdown ends the job for every rank, so agree that all tests are done first.
  void TearDown() override {
    EXPECT_TRUE(Wait(Barrier()).ok());
    EXPECT_TRUE(Shutdown().ok());
  }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new HvxEnvironment);

// Holds values of any dtype, converted from double.
struct Buffer {
  DataType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DataType t, size_t n) : dtype(t), bytes(n * DataTypeSize(t)) {}
  size_t n() const { return bytes.size() / DataTypeSize(dtype); }
  void Set(size_t i, double v) {
    void* p = bytes.data() + i * DataTypeSize(dtype);
    switch (dtype) {
      case DataType::kUint8:
        *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
        break;
      case DataType::kInt8:
        *static_cast<int8_t*>(p) = static_cast<int8_t>(v);
        break;
      case DataType::kInt16:
        *static_cast<int16_t*>(p) = static_cast<int16_t>(v);
        break;
      case DataType::kInt32:
        *static_cast<int32_t*>(p) = static_cast<int32_t>(v);
        break;
      case DataType::kInt64:
        *static_cast<int64_t*>(p) = static_cast<int64_t>(v);
        break;
      case DataType::kFloat16:
        *static_cast<uint16_t*>(p) = FloatToHalf(static_cast<float>(v));
        break;
      case DataType::kBfloat16:
        *static_cast<uint16_t*>(p) = FloatToBfloat16(static_cast<float>(v));
        break;
      case DataType::kFloat32:
        *static_cast<float*>(p) = static_cast<float>(v);
        break;
      case DataType::kFloat64:
        *static_cast<double*>(p) = v;
        break;
      case DataType::kBool:
        *static_cast<uint8_t*>(p) = v != 0;
        break;
    }
  }
  double Get(size_t i) const {
    const void* p = bytes.data() + i * DataTypeSize(dtype);
    switch (dtype) {
      case DataType::kUint8:
        return *static_cast<const uint8_t*>(p);
      case DataType::kInt8:
        return *static_cast<const int8_t*>(p);
      case DataType::kInt16:
        return *static_cast<const int16_t*>(p);
      case DataType::kInt32:
        return *static_cast<const int32_t*>(p);
      case DataType::kInt64:
        return static_cast<double>(*static_cast<const int64_t*>(p));
      case DataType::kFloat16:
        return HalfToFloat(*static_cast<const uint16_t*>(p));
      case DataType::kBfloat16:
        return Bfloat16ToFloat(*static_cast<const uint16_t*>(p));
      case DataType::kFloat32:
        return *static_cast<const float*>(p);
      case DataType::kFloat64:
        return *static_cast<const double*>(p);
      case DataType::kBool:
        return *static_cast<const uint8_t*>(p);
    }
    return 0;
  }
  TensorRef Ref(TensorShape shape) { return TensorRef(dtype, std::move(shape), bytes.data()); }
  TensorRef Ref() { return Ref(TensorShape({static_cast<int64_t>(n())})); }
};

// Small values exact in every dtype: rank r, element i -> 1 + (i + r) % 3.
double Value(int rank, size_t i) { return 1 + static_cast<double>((i + rank) % 3); }

TEST(CollectivesTest, Topology) {
  ASSERT_EQ(Size(), 2);
  EXPECT_EQ(Rank(), std::atoi(std::getenv("PMI_RANK")));
  EXPECT_EQ(LocalSize(), 2);
  EXPECT_EQ(LocalRank(), Rank());
  EXPECT_EQ(CrossSize(), 1);
  EXPECT_EQ(CrossRank(), 0);
  EXPECT_TRUE(IsHomogeneous());
  EXPECT_EQ(Host(), HostName());  // one host, named by its host name
}

TEST(CollectivesTest, AllreduceEveryDtypeAndOp) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct};
  for (DataType dt : kAllDataTypes) {
    for (ReduceOp op : ops) {
      const size_t n = 17;
      Buffer in(dt, n), out(dt, n);
      for (size_t i = 0; i < n; ++i) in.Set(i, Value(Rank(), i));
      const std::string name = absl::StrCat("ar.", DataTypeName(dt), ".", ReduceOpName(op));
      AllreduceOptions o;
      o.op = op;
      ASSERT_TRUE(Wait(Allreduce(name, in.Ref(), out.Ref(), o)).ok()) << name;
      for (size_t i = 0; i < n; ++i) {
        const double a = Value(0, i), b = Value(1, i);
        double want = 0;
        switch (op) {
          case ReduceOp::kSum:
            want = a + b;
            break;
          case ReduceOp::kAverage:
            want = (a + b) / 2;
            break;
          case ReduceOp::kMin:
            want = std::min(a, b);
            break;
          case ReduceOp::kMax:
            want = std::max(a, b);
            break;
          default:
            want = a * b;
            break;
        }
        if (dt == DataType::kBool)
          want = (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? 1 : 1;
        if (!IsFloatingPoint(dt) && dt != DataType::kBool) want = std::trunc(want);
        EXPECT_EQ(out.Get(i), want) << name << " element " << i;
      }
    }
  }
}

TEST(CollectivesTest, CheckSameOnEveryRank) {
  EXPECT_TRUE(
      CheckSameOnEveryRank("agree.same", {{"dataset samples", "60000"}, {"config", "abc"}}).ok());
  absl::Status s = CheckSameOnEveryRank(
      "agree.differ", {{"dataset samples", Rank() == 0 ? "60000" : "59999"}, {"config", "abc"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "dataset samples: rank 0 has 60000, rank 1 has 59999"))
      << s;
  // Lengths differ between ranks, one of them empty.
  s = CheckSameOnEveryRank(
      "agree.empty", Rank() == 0 ? std::vector<std::pair<std::string, std::string>>{}
                                 : std::vector<std::pair<std::string, std::string>>{{"x", "1"}});
  EXPECT_TRUE(absl::StrContains(s.message(), "x: rank 1 has 1, the other ranks do not set it"))
      << s;
}

TEST(CollectivesTest, PrescaleAndPostscale) {
  std::vector<float> x(10, 1.0f + Rank());
  AllreduceOptions o;
  o.op = ReduceOp::kSum;
  o.prescale_factor = 0.5;
  o.postscale_factor = 3.0;
  ASSERT_TRUE(Wait(Allreduce("scaled", TensorRef(DataType::kFloat32, {10}, x.data()),
                             TensorRef(DataType::kFloat32, {10}, x.data()), o))
                  .ok());
  for (float v : x) EXPECT_FLOAT_EQ(v, (1 + 2) * 0.5f * 3.0f);
}

TEST(CollectivesTest, AsyncFusedSubmissionIsReallyAsync) {
  bool saw_pending = false;
  for (int round = 0; round < 3; ++round) {
    const int k = 64;
    std::vector<std::vector<float>> data(k);
    std::vector<Handle> handles;
    for (int t = 0; t < k; ++t) {
      data[t].assign(1000 + t, static_cast<float>(Rank() + t));
      TensorRef ref(DataType::kFloat32, {static_cast<int64_t>(data[t].size())}, data[t].data());
      AllreduceOptions o;
      o.op = ReduceOp::kSum;
      handles.push_back(Allreduce(absl::StrCat("fused.", t), ref, ref, o));
      if (!Poll(handles.back())) saw_pending = true;
    }
    ASSERT_TRUE(WaitAll(handles).ok());
    for (int t = 0; t < k; ++t) {
      for (float v : data[t]) ASSERT_EQ(v, static_cast<float>(2 * t + 1)) << "tensor " << t;
    }
  }
  EXPECT_TRUE(saw_pending);
}

TEST(CollectivesTest, LargeFusedAllreduceOfOddSizesInAndOutOfPlace) {
  // Over 256 KiB in total: the ring runs over the tensors where they lie, with segment
  // boundaries falling inside tensors; those under 64 KiB travel packed, in and out of place.
  const std::vector<int64_t> sizes = {100003, 70001, 3, 200000, 5, 1000, 16383};
  std::vector<std::vector<float>> in(sizes.size()), out(sizes.size());
  std::vector<Handle> handles;
  AllreduceOptions o;
  o.prescale_factor = 2.0;  // average of 2 * v: (2 * (i % 7) + 2 * (i % 7 + 1)) / 2
  for (size_t t = 0; t < sizes.size(); ++t) {
    in[t].resize(sizes[t]);
    for (int64_t i = 0; i < sizes[t]; ++i) in[t][i] = static_cast<float>(i % 7 + Rank());
    const bool in_place = t % 2 == 0;
    if (!in_place) out[t].assign(sizes[t], -1.0f);
    TensorRef src(DataType::kFloat32, {sizes[t]}, in[t].data());
    TensorRef dst(DataType::kFloat32, {sizes[t]}, in_place ? in[t].data() : out[t].data());
    handles.push_back(Allreduce(absl::StrCat("large.", t), src, dst, o));
  }
  ASSERT_TRUE(WaitAll(handles).ok());
  for (size_t t = 0; t < sizes.size(); ++t) {
    const std::vector<float>& result = t % 2 == 0 ? in[t] : out[t];
    for (int64_t i = 0; i < sizes[t]; ++i) {
      ASSERT_EQ(result[i], static_cast<float>(2 * (i % 7) + 1))
          << "tensor " << t << " element " << i;
    }
  }
}

TEST(CollectivesTest, GroupedAllreduce) {
  std::vector<double> a(5, Rank() + 1.0), b(7, 10.0 * (Rank() + 1));
  std::vector<TensorRef> refs = {TensorRef(DataType::kFloat64, {5}, a.data()),
                                 TensorRef(DataType::kFloat64, {7}, b.data())};
  ASSERT_TRUE(Wait(GroupedAllreduce("group", refs, refs)).ok());
  for (double v : a) EXPECT_EQ(v, 1.5);
  for (double v : b) EXPECT_EQ(v, 15.0);
}

TEST(CollectivesTest, AllgatherVariableFirstDimension) {
  const int rows = 2 + 3 * Rank();
  std::vector<int32_t> in(rows * 4, Rank());
  Handle h = Allgather("gather.var", TensorRef(DataType::kInt32, {rows, 4}, in.data()));
  ASSERT_TRUE(Wait(h).ok());
  ASSERT_EQ(h.output().shape(), TensorShape({2 + 5, 4}));
  const int32_t* out = h.output().data_as<int32_t>();
  for (int i = 0; i < 7 * 4; ++i) EXPECT_EQ(out[i], i < 8 ? 0 : 1) << i;
}

TEST(CollectivesTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < 2; ++root) {
    std::vector<uint16_t> x(9, FloatToBfloat16(static_cast<float>(Rank() + 5)));
    ASSERT_TRUE(Wait(Broadcast(absl::StrCat("bcast.", root),
                               TensorRef(DataType::kBfloat16, {3, 3}, x.data()), root))
                    .ok());
    for (uint16_t v : x) EXPECT_EQ(Bfloat16ToFloat(v), root + 5.0f);
  }
}

TEST(CollectivesTest, AlltoallExplicitAndEqualSplits) {
  // Rank r sends (r + 1) rows to rank 0 and 1 row to rank 1; row value = 10 * r + destination.
  std::vector<int64_t> splits = {Rank() + 1, 1};
  std::vector<int64_t> in;
  for (int j = 0; j < 2; ++j) {
    for (int k = 0; k < splits[j]; ++k) in.push_back(10 * Rank() + j);
  }
  Handle h = Alltoall(
      "a2a", TensorRef(DataType::kInt64, {static_cast<int64_t>(in.size())}, in.data()), splits);
  ASSERT_TRUE(Wait(h).ok());
  const std::vector<int64_t> want_splits =
      Rank() == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 1};
  EXPECT_EQ(h.received_splits(), want_splits);
  const int64_t* out = h.output().data_as<int64_t>();
  int64_t idx = 0;
  for (int j = 0; j < 2; ++j) {
    for (int k = 0; k < want_splits[j]; ++k) EXPECT_EQ(out[idx++], 10 * j + Rank());
  }
  std::vector<float> eq(4, static_cast<float>(Rank()));
  Handle h2 = Alltoall("a2a.equal", TensorRef(DataType::kFloat32, {4}, eq.data()));
  ASSERT_TRUE(Wait(h2).ok());
  EXPECT_EQ(h2.received_splits(), (std::vector<int64_t>{2, 2}));
  const float* o2 = h2.output().data_as<float>();
  EXPECT_EQ(std::vector<float>(o2, o2 + 4), (std::vector<float>{0, 0, 1, 1}));
}

TEST(CollectivesTest, ReduceScatterUnevenRows) {
  // 5 rows of 2: rank 0 gets 3 rows, rank 1 gets 2.
  std::vector<float> in(10);
  for (int i = 0; i < 10; ++i) in[i] = static_cast<float>(i * (Rank() + 1));
  ReduceScatterOptions o;
  o.op = ReduceOp::kSum;
  Handle h = ReduceScatter("rs", TensorRef(DataType::kFloat32, {5, 2}, in.data()), o);
  ASSERT_TRUE(Wait(h).ok());
  EXPECT_EQ(h.output().shape(), TensorShape({Rank() == 0 ? 3 : 2, 2}));
  const int first = Rank() == 0 ? 0 : 6;
  for (int i = 0; i < h.output().num_elements(); ++i)
    EXPECT_EQ(h.output().data_as<float>()[i], 3.0f * (first + i));
  EXPECT_EQ(ReduceScatterRows(5, 2, 0), 3);
}

// Every error case: the op fails on both ranks with a message naming the tensor.
void ExpectBothFail(const Handle& h, const std::string& text) {
  const absl::Status s = Wait(h);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), text)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), h.name())) << s;
}

TEST(CollectivesTest, ShapeMismatchFailsEverywhere) {
  std::vector<float> x(17 + Rank());
  TensorRef t(DataType::kFloat32, {static_cast<int64_t>(x.size())}, x.data());
  ExpectBothFail(Allreduce("err.shape", t, t), "mismatched ALLREDUCE shapes");
  // Same element count, different rank.
  std::vector<float> y(6);
  TensorRef u(DataType::kFloat32, Rank() == 0 ? TensorShape({6}) : TensorShape({2, 3}), y.data());
  ExpectBothFail(Allreduce("err.ndim", u, u), "mismatched ALLREDUCE shapes");
}

TEST(CollectivesTest, ShapeChangeAfterCachingFailsEverywhere) {
  std::vector<float> x(8, 1.0f);
  TensorRef t(DataType::kFloat32, {8}, x.data());
  ASSERT_TRUE(Wait(Allreduce("err.cached", t, t)).ok());
  ASSERT_TRUE(Wait(Allreduce("err.cached", t, t)).ok());
  TensorRef v(DataType::kFloat32, {Rank() == 0 ? 8 : 4}, x.data());
  ExpectBothFail(Allreduce("err.cached", v, v), "mismatched ALLREDUCE shapes");
}

TEST(CollectivesTest, DtypeMismatchFailsEverywhere) {
  std::vector<int64_t> x(4);
  TensorRef t(Rank() == 0 ? DataType::kInt32 : DataType::kFloat32, {4}, x.data());
  ExpectBothFail(Allreduce("err.dtype", t, t), "mismatched data types");
}

TEST(CollectivesTest, BroadcastRootMismatchFailsEverywhere) {
  std::vector<float> x(4);
  ExpectBothFail(Broadcast("err.root", TensorRef(DataType::kFloat32, {4}, x.data()), Rank()),
                 "root");
}

TEST(CollectivesTest, AlltoallBadSplitsFailEverywhere) {
  std::vector<float> x(4);
  TensorRef t(DataType::kFloat32, {4}, x.data());
  ExpectBothFail(Alltoall("err.splits", t, {3, 3}), "splits sum to 6");
  std::vector<float> y(3);
  ExpectBothFail(Alltoall("err.equal", TensorRef(DataType::kFloat32, {3}, y.data())),
                 "does not divide");
}

TEST(CollectivesTest, AllgatherTailMismatchFailsEverywhere) {
  std::vector<float> x(12);
  ExpectBothFail(
      Allgather("err.gather", TensorRef(DataType::kFloat32, {2, 3 + Rank() * 3}, x.data())),
      "mismatched ALLGATHER shapes");
}

TEST(CollectivesTest, DuplicateNameFailsLocally) {
  std::vector<float> x(4, 1.0f);
  TensorRef t(DataType::kFloat32, {4}, x.data());
  if (Rank() == 0) {
    Handle first = Allreduce("dup", t, t);
    Handle second = Allreduce("dup", t, t);
    const absl::Status s = Wait(second);
    EXPECT_TRUE(absl::StrContains(s.message(), "still in flight")) << s;
    EXPECT_TRUE(Wait(first).ok());
  } else {
    usleep(100000);
    EXPECT_TRUE(Wait(Allreduce("dup", t, t)).ok());
  }
}

TEST(CollectivesTest, JoinContributesZerosAndReportsLastRank) {
  std::vector<float> x(6, 4.0f);
  TensorRef t(DataType::kFloat32, {6}, x.data());
  std::vector<float> big(300000);  // large enough for the ring path
  TensorRef tb(DataType::kFloat32, {300000}, big.data());
  if (Rank() == 1) {
    Handle j = Join();
    ASSERT_TRUE(Wait(j).ok());
    EXPECT_EQ(j.last_joined_rank(), 0);
  } else {
    for (int step = 0; step < 3; ++step) {
      std::fill(x.begin(), x.end(), 4.0f);
      std::fill(big.begin(), big.end(), 6.0f);
      Handle hb = Allreduce("join.big", tb, tb);
      ASSERT_TRUE(Wait(Allreduce("join.grad", t, t)).ok());
      ASSERT_TRUE(Wait(hb).ok());
      for (float v : x) EXPECT_EQ(v, 2.0f);  // (4 + 0) / 2
      for (float v : big) ASSERT_EQ(v, 3.0f);
    }
    Handle j = Join();
    ASSERT_TRUE(Wait(j).ok());
    EXPECT_EQ(j.last_joined_rank(), 0);
  }
  // Collectives work normally afterwards.
  std::fill(x.begin(), x.end(), 1.0f);
  ASSERT_TRUE(Wait(Allreduce("after.join", t, t)).ok());
  EXPECT_EQ(x[0], 1.0f);
}

TEST(CollectivesTest, BarrierWaitsForTheSlowestRank) {
  const absl::Time start = absl::Now();
  if (Rank() == 0) usleep(500000);
  ASSERT_TRUE(Wait(Barrier()).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(450));
}

TEST(CollectivesTest, ProcessSetsOfOneRank) {
  auto zero = AddProcessSet({0});
  auto one = AddProcessSet({1});
  ASSERT_TRUE(zero.ok() && one.ok());
  EXPECT_NE(zero->id(), one->id());
  EXPECT_EQ(AddProcessSet({0})->id(), zero->id());
  const ProcessSet mine = Rank() == 0 ? *zero : *one;
  EXPECT_EQ(mine.rank(), 0);
  EXPECT_EQ(mine.size(), 1);
  std::vector<float> x(3, Rank() + 1.0f);
  TensorRef t(DataType::kFloat32, {3}, x.data());
  AllreduceOptions o;
  o.op = ReduceOp::kSum;
  o.process_set = mine;
  ASSERT_TRUE(Wait(Allreduce("ps.sum", t, t, o)).ok());
  EXPECT_EQ(x[0], Rank() + 1.0f);
  o.process_set = Rank() == 0 ? *one : *zero;
  EXPECT_TRUE(absl::StrContains(Wait(Allreduce("ps.foreign", t, t, o)).message(), "not a member"));
}

TEST(CollectivesTest, AdasumOrthogonalIsSumIdenticalIsAverage) {
  std::vector<double> x = {Rank() == 0 ? 1.0 : 0.0, Rank() == 1 ? 2.0 : 0.0};
  AllreduceOptions o;
  o.op = ReduceOp::kAdasum;
  TensorRef t(DataType::kFloat64, {2}, x.data());
  ASSERT_TRUE(Wait(Allreduce("adasum.orth", t, t, o)).ok());
  EXPECT_DOUBLE_EQ(x[0], 1.0);
  EXPECT_DOUBLE_EQ(x[1], 2.0);
  std::vector<float> y = {3.0f, 4.0f};
  ASSERT_TRUE(Wait(Allreduce("adasum.same", TensorRef(DataType::kFloat32, {2}, y.data()),
                             TensorRef(DataType::kFloat32, {2}, y.data()), o))
                  .ok());
  EXPECT_FLOAT_EQ(y[0], 3.0f);
  EXPECT_FLOAT_EQ(y[1], 4.0f);
}

TEST(CollectivesTest, StallIsReportedAndFailsThePendingOp) {
  std::vector<float> x(2);
  TensorRef t(DataType::kFloat32, {2}, x.data());
  if (Rank() == 0) {
    const absl::Status s = Wait(Allreduce("stall.only.rank0", t, t));
    EXPECT_TRUE(absl::StrContains(s.message(), "stalled")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "1: [stall.only.rank0]")) << s;
    std::lock_guard<std::mutex> lock(g_log_mu);
    EXPECT_TRUE(absl::StrContains(*g_log, "Missing ranks:")) << *g_log;
    EXPECT_TRUE(absl::StrContains(*g_log, "1: [stall.only.rank0]")) << *g_log;
  } else {
    usleep(6000000);
  }
  ASSERT_TRUE(Wait(Barrier()).ok());
}

TEST(CollectivesTest, TimelineIsValidAndNamesPhases) {
  std::vector<float> x(2);
  TensorRef t(DataType::kFloat32, {2}, x.data());
  ASSERT_TRUE(Wait(Allreduce("timeline.probe", t, t)).ok());
  if (Rank() != 0) return;
  std::ifstream in(TimelinePath());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.front(), '[');
  EXPECT_EQ(text.back(), ']');
  // The data plane's phase: this test runs once per CPU plane (BUILD: HVX_CPU_PLANE).
  const char* env = std::getenv("HVX_CPU_PLANE");
  const std::string plane_phase =
      env != nullptr && std::string(env) == "mpi" ? "MPI_ALLREDUCE" : "SHM_ALLREDUCE";
  for (const std::string& want : {std::string("\"timeline.probe\""),
                                  std::string("NEGOTIATE_ALLREDUCE"), std::string("\"ALLREDUCE\""),
                                  plane_phase, std::string("start_time_since_epoch_in_micros")}) {
    EXPECT_TRUE(absl::StrContains(text, want)) << want;
  }
  // Balanced braces: every record closed.
  EXPECT_EQ(std::count(text.begin(), text.end(), '{'), std::count(text.begin(), text.end(), '}'));
}

}  // namespace
}  // namespace hvx
