// The NCCL data plane on real GPUs, every rank under mpiexec with one GPU each, over the real MPI
// transport (//hvx/mpi) as the engine would drive it. Skipped, with the reason, where this host
// shows fewer GPUs than the test has ranks (or none).
#include "hvx/nccl/nccl_data_plane.h"

#include <cuda_runtime.h>

#include <memory>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hvx/common/half.h"
#include "hvx/nccl/test_world.h"

namespace hvx {
namespace nccl {
namespace {

using ::testing::HasSubstr;

// A device buffer holding a copy of `host`; freed with the object.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(1, n_) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceVector() { cudaFree(ptr_); }
  T* get() const { return static_cast<T*>(ptr_); }
  std::vector<T> ToHost() const {
    std::vector<T> out(n_);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  TensorRef Ref(DataType t, TensorShape shape, int device) const {
    return TensorRef(t, shape, ptr_, Device::Cuda(device));
  }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

// The MPI world, started once for all tests of the binary (MPI cannot be initialized twice).
TestWorld* world = nullptr;

class WorldEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto started = TestWorld::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    world_ = std::move(*started);
    world = world_.get();
  }
  void TearDown() override {
    world = nullptr;
    world_.reset();
  }

 private:
  std::unique_ptr<TestWorld> world_;
};
::testing::Environment* const kWorldEnvironment [[maybe_unused]] =
    ::testing::AddGlobalTestEnvironment(new WorldEnvironment);

class NcclDataPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(world, nullptr);
    ctx_ = world->Context(0);
    int gpus = 0;
    cudaError_t err = cudaGetDeviceCount(&gpus);
    if (err != cudaSuccess) gpus = 0;
    // Every rank takes the same decision, so no rank waits in a collective alone.
    std::vector<uint64_t> enough = {gpus >= ctx_.local_size ? 1u : 0u};
    ASSERT_TRUE(world->comm().BitwiseAnd(&enough).ok());
    if (enough[0] == 0) {
      GTEST_SKIP() << "needs one GPU per rank: " << ctx_.local_size << " ranks on this host, "
                   << (err != cudaSuccess ? std::string(cudaGetErrorString(err))
                                          : std::to_string(gpus) + " GPU(s)");
    }
    device_ = ctx_.local_rank;
    ctx_.device = Device::Cuda(device_);
    ASSERT_EQ(cudaSetDevice(device_), cudaSuccess);
    auto plane = CreateNcclDataPlane(ctx_, NcclOptions{});
    ASSERT_TRUE(plane.ok()) << plane.status();
    plane_ = std::move(*plane);
    rank_ = world->comm().rank();
    size_ = world->comm().size();
  }

  DataPlaneContext ctx_;
  std::unique_ptr<DataPlane> plane_;
  int device_ = 0;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(NcclDataPlaneTest, AllreduceSumAverageMinMaxProduct) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::vector<float> x = {1.0f + rank_, 2.0f, -3.0f * (rank_ + 1)};
    DeviceVector<float> d(x);
    AllreduceWork w;
    w.names = {"t"};
    w.inputs = {d.Ref(DataType::kFloat32, {3}, device_)};
    w.outputs = w.inputs;
    w.op = op;
    ASSERT_TRUE(plane_->Allreduce(w).ok()) << ReduceOpName(op);
    std::vector<float> want(3);
    for (int i = 0; i < 3; ++i) {
      float acc =
          op == ReduceOp::kProduct ? 1.0f : (op == ReduceOp::kSum ? 0.0f : (i == 0 ? 1.0f : x[i]));
      for (int r = 0; r < size_; ++r) {
        const float v = i == 0 ? 1.0f + r : (i == 1 ? 2.0f : -3.0f * (r + 1));
        if (op == ReduceOp::kSum) acc += v;
        if (op == ReduceOp::kProduct) acc *= v;
        if (op == ReduceOp::kMin) acc = r == 0 ? v : std::min(acc, v);
        if (op == ReduceOp::kMax) acc = r == 0 ? v : std::max(acc, v);
      }
      want[i] = acc;
    }
    EXPECT_EQ(d.ToHost(), want) << ReduceOpName(op);
  }
  // Average as the engine sends it: Sum with postscale 1/size (integers: exact, truncated).
  DeviceVector<int32_t> i32(std::vector<int32_t>{3 * rank_ + 1});
  AllreduceWork avg;
  avg.names = {"avg"};
  avg.dtype = DataType::kInt32;
  avg.inputs = {i32.Ref(DataType::kInt32, {1}, device_)};
  avg.outputs = avg.inputs;
  avg.postscale_factor = 1.0 / size_;
  ASSERT_TRUE(plane_->Allreduce(avg).ok());
  int32_t sum = 0;
  for (int r = 0; r < size_; ++r) sum += 3 * r + 1;
  EXPECT_EQ(i32.ToHost()[0], sum / size_);
}

TEST_F(NcclDataPlaneTest, FusedWithScalesJoinedSlotsAndHalves) {
  DeviceVector<float> a(std::vector<float>{1, 2});
  DeviceVector<float> out_a(std::vector<float>{0, 0});
  DeviceVector<float> b(std::vector<float>{10, 20, 30});
  AllreduceWork w;
  w.names = {"a", "b", "joined"};
  w.inputs = {a.Ref(DataType::kFloat32, {2}, device_), b.Ref(DataType::kFloat32, {3}, device_),
              TensorRef(DataType::kFloat32, TensorShape({4}), nullptr, Device::Cuda(device_))};
  w.outputs = {out_a.Ref(DataType::kFloat32, {2}, device_), w.inputs[1], w.inputs[2]};
  w.prescale_factor = 2.0;
  w.postscale_factor = 0.5;
  ASSERT_TRUE(plane_->Allreduce(w).ok());
  EXPECT_EQ(out_a.ToHost(), (std::vector<float>{1.0f * size_, 2.0f * size_}));
  EXPECT_EQ(b.ToHost(), (std::vector<float>{10.0f * size_, 20.0f * size_, 30.0f * size_}));
  EXPECT_EQ(a.ToHost(), (std::vector<float>{1, 2}));  // input untouched when output differs

  for (bool wide : {false, true}) {
    NcclOptions o;
    o.half_in_float32 = wide;
    auto plane = CreateNcclDataPlane(ctx_, o);
    ASSERT_TRUE(plane.ok()) << plane.status();
    DeviceVector<uint16_t> h(std::vector<uint16_t>{FloatToHalf(0.5f), FloatToHalf(rank_)});
    AllreduceWork hw;
    hw.names = {"h"};
    hw.dtype = DataType::kFloat16;
    hw.inputs = {h.Ref(DataType::kFloat16, {2}, device_)};
    hw.outputs = hw.inputs;
    ASSERT_TRUE((*plane)->Allreduce(hw).ok());
    std::vector<uint16_t> got = h.ToHost();
    EXPECT_EQ(HalfToFloat(got[0]), 0.5f * size_) << "wide=" << wide;
    EXPECT_EQ(HalfToFloat(got[1]), size_ * (size_ - 1) / 2.0f) << "wide=" << wide;
  }
}

TEST_F(NcclDataPlaneTest, AllgatherWithDifferingRows) {
  const int my_rows = rank_ + 1;
  std::vector<int64_t> rows(size_);
  std::iota(rows.begin(), rows.end(), 1);
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  DeviceVector<int32_t> in(std::vector<int32_t>(my_rows * 2, rank_));
  DeviceVector<int32_t> out(std::vector<int32_t>(total * 2, -1));
  AllgatherWork w;
  w.name = "gather";
  w.input = in.Ref(DataType::kInt32, {my_rows, 2}, device_);
  w.output = out.Ref(DataType::kInt32, {total, 2}, device_);
  w.rows = rows;
  w.row_elements = 2;
  ASSERT_TRUE(plane_->Allgather(w).ok());
  std::vector<int32_t> want;
  for (int r = 0; r < size_; ++r) want.insert(want.end(), (r + 1) * 2, r);
  EXPECT_EQ(out.ToHost(), want);
}

TEST_F(NcclDataPlaneTest, BroadcastAlltoallReduceScatter) {
  DeviceVector<double> t(std::vector<double>{rank_ == 0 ? 4.5 : 0.0, 1.0 * rank_});
  BroadcastWork bw;
  bw.name = "bcast";
  bw.tensor = t.Ref(DataType::kFloat64, {2}, device_);
  ASSERT_TRUE(plane_->Broadcast(bw).ok());
  EXPECT_EQ(t.ToHost(), (std::vector<double>{4.5, 0.0}));

  // Rank r sends j+1 rows of value 100*r+j to rank j.
  std::vector<int64_t> send(size_), recv(size_, rank_ + 1);
  std::vector<int32_t> in_host;
  for (int j = 0; j < size_; ++j) {
    send[j] = j + 1;
    in_host.insert(in_host.end(), j + 1, 100 * rank_ + j);
  }
  DeviceVector<int32_t> in(in_host);
  DeviceVector<int32_t> out(std::vector<int32_t>(size_ * (rank_ + 1), -1));
  AlltoallWork aw;
  aw.name = "a2a";
  aw.input = in.Ref(DataType::kInt32, {static_cast<int64_t>(in_host.size())}, device_);
  aw.output = out.Ref(DataType::kInt32, {size_ * (rank_ + 1)}, device_);
  aw.send_rows = send;
  aw.recv_rows = recv;
  ASSERT_TRUE(plane_->Alltoall(aw).ok());
  std::vector<int32_t> want;
  for (int r = 0; r < size_; ++r) want.insert(want.end(), rank_ + 1, 100 * r + rank_);
  EXPECT_EQ(out.ToHost(), want);

  // size_+1 rows of 1.0: rank 0 gets two rows, the others one; values sum to size_, times post 0.5.
  const int64_t rows = size_ + 1;
  DeviceVector<float> rs_in(std::vector<float>(rows * 3, 1.0f));
  const int64_t my = ReduceScatterRows(rows, size_, rank_);
  DeviceVector<float> rs_out(std::vector<float>(my * 3, -1.0f));
  ReduceScatterWork rw;
  rw.name = "rs";
  rw.input = rs_in.Ref(DataType::kFloat32, {rows, 3}, device_);
  rw.output = rs_out.Ref(DataType::kFloat32, {my, 3}, device_);
  for (int r = 0; r < size_; ++r) rw.recv_rows.push_back(ReduceScatterRows(rows, size_, r));
  rw.row_elements = 3;
  rw.postscale_factor = 0.5;
  ASSERT_TRUE(plane_->ReduceScatter(rw).ok());
  EXPECT_EQ(rs_out.ToHost(), std::vector<float>(my * 3, 0.5f * size_));
}

TEST_F(NcclDataPlaneTest, ErrorsNameTheTensor) {
  DeviceVector<float> d(std::vector<float>{1});
  AllreduceWork w;
  w.names = {"grad.w"};
  w.inputs = {d.Ref(DataType::kFloat32, {1}, device_)};
  w.outputs = w.inputs;
  w.op = ReduceOp::kAdasum;
  absl::Status s = plane_->Allreduce(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tensor 'grad.w'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("Adasum is not available for GPU tensors"));
  w.op = ReduceOp::kSum;
  w.inputs = {TensorRef(DataType::kFloat32, TensorShape({1}), d.get(), Device::Cuda(device_ + 1))};
  s = plane_->Allreduce(w);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is on cuda:" + std::to_string(device_ + 1)));
}

}  // namespace
}  // namespace nccl
}  // namespace hvx
