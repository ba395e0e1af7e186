// Links a cuda_library kernel with cudart and NCCL. With a GPU: scales a buffer on the device and
// runs a one-rank NCCL allreduce over it. Without one: checks the libraries load, then skips.
#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "gtest/gtest.h"
#include "tests/deps/cuda_scale.h"

namespace {

TEST(CudaNcclLinkTest, KernelAndAllreduce) {
  int nccl_version = 0;
  ASSERT_EQ(ncclGetVersion(&nccl_version), ncclSuccess);
  EXPECT_GT(nccl_version, 0);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device here (NCCL " << nccl_version << " loaded)";
  }
  std::vector<float> host = {1, 2, 3, 4};
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(ScaleOnDevice(dev, 4, 2.0f), 0);
  ncclComm_t comm;
  int dev0 = 0;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, &dev0), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(dev, dev, 4, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), dev, host.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(host, (std::vector<float>{2, 4, 6, 8}));
  ncclCommDestroy(comm);
  cudaFree(dev);
}

}  // namespace
