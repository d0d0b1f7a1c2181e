// kernel_set(variant, device): a model's kernels are one variant of every op on one device; a
// variant some op lacks there is refused in one line that names those ops and the device's sets.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "model/kernels.h"

using namespace titan;
using namespace titan::test;

TEST(KernelSet, OneVariantOfEveryOpOnTheDevice) {
  const KernelSet c = kernel_set(default_variant(DeviceType::CPU), DeviceType::CPU);
  EXPECT_STREQ(c.linear->variant, "cpu");
  EXPECT_STREQ(c.gated_delta->variant, "cpu");
  EXPECT_STREQ(c.moe->variant, "grouped_gemm");  // the MoE op's optimized CPU variant
  const KernelSet r = kernel_set("reference");
  EXPECT_STREQ(r.attention->variant, "reference");
  EXPECT_STREQ(r.moe->variant, "reference");
  // The cuda variants (staging host tensors) cover every op, so they are a whole CPU set too.
  const KernelSet cu = kernel_set("cuda");
  EXPECT_STREQ(cu.moe->variant, "cuda");
  EXPECT_STREQ(cu.gated_delta->variant, "cuda");
  EXPECT_EQ(kernel_sets(DeviceType::CPU), (std::vector<std::string>{"cpu", "cuda", "reference"}));
  // On the GPU every op's cuda variant also takes GPU tensors in place: a whole set there too.
  EXPECT_EQ(kernel_sets(DeviceType::CUDA), (std::vector<std::string>{"cuda"}));
  const KernelSet g = kernel_set("cuda", DeviceType::CUDA);
  EXPECT_STREQ(g.linear->variant, "cuda");
  EXPECT_NE(g.linear, cu.linear);  // the GPU registration, not the staging one
}

TEST(KernelSet, RefusesAVariantSomeOpLacksOnTheDevice) {
  // grouped_gemm is a variant of the moe op only.
  const std::string e = error_of([] { kernel_set("grouped_gemm"); });
  EXPECT_NE(e.find("kernel set 'grouped_gemm' has no cpu kernels for "), std::string::npos) << e;
  EXPECT_NE(e.find("embedding"), std::string::npos) << e;
  EXPECT_EQ(e.find("moe"), std::string::npos) << e;  // it has that one
  EXPECT_NE(e.find("(kernel sets on cpu: cpu, cuda, reference)"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_ERROR_HAS(kernel_set("cpu", DeviceType::CUDA),
                   "kernel set 'cpu' has no cuda kernels for embedding, linear, rmsnorm");
  EXPECT_ERROR_HAS(kernel_set("cpu", DeviceType::CUDA), "(kernel sets on cuda: cuda)");
  EXPECT_ERROR_HAS(kernel_set("fast"), "kernel set 'fast' has no cpu kernels for embedding");
}
