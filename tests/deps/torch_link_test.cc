// Proves that @hvx_torch compiles and links with the ABI the installation was built with.
#include <torch/torch.h>

#include "gtest/gtest.h"

namespace {

TEST(TorchLinkTest, TensorMathAndAutograd) {
  torch::Tensor x = torch::arange(6, torch::kFloat32).reshape({2, 3}).requires_grad_();
  torch::Tensor y = (x * x).sum();
  y.backward();
  EXPECT_FLOAT_EQ(y.item<float>(), 55.0f);
  EXPECT_TRUE(torch::allclose(x.grad(), 2 * x.detach()));
  // A std::string crossing into libc10 only links with the matching _GLIBCXX_USE_CXX11_ABI.
  c10::Device cpu(std::string("cpu"));
  EXPECT_TRUE(cpu.is_cpu());
}

}  // namespace
