#include "hvx/train/models.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace hvx {
namespace train {
namespace {

TEST(ModelsTest, ChannelsLastMovesTheConvolutionWeightsAndKeepsTheOutput) {
  ModelConfig config;
  config.set_name("resnet18");
  config.set_num_classes(10);
  torch::manual_seed(3);
  auto plain = *CreateModel(config);
  torch::manual_seed(3);
  auto nhwc = *CreateModel(config);
  const auto before = nhwc->parameters();
  EXPECT_EQ(ToChannelsLast(*nhwc), 20);  // 17 convolutions + 3 shortcut convolutions
  const auto after = nhwc->parameters();
  ASSERT_EQ(before.size(), after.size());
  int moved = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(after[i].is_same(before[i]));  // the same tensors: optimizers still own them
    if (after[i].dim() == 4) {
      EXPECT_TRUE(after[i].is_contiguous(at::MemoryFormat::ChannelsLast));
      if (after[i].size(2) > 1) {  // a 1x1 kernel is contiguous in both layouts
        EXPECT_FALSE(after[i].is_contiguous());
      }
      ++moved;
    }
  }
  EXPECT_EQ(moved, 20);
  plain->eval();
  nhwc->eval();
  const at::Tensor x = torch::randn({2, 3, 64, 64});
  EXPECT_TRUE(torch::allclose(
      plain->forward(x), nhwc->forward(x.contiguous(at::MemoryFormat::ChannelsLast)), 1e-4, 1e-5));
}

}  // namespace
}  // namespace train
}  // namespace hvx
