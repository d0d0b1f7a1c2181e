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
  EXPECT_EQ(kernel_sets(DeviceType::CPU), (std::vector<std::string>{"cpu", "reference"}));
  EXPECT_TRUE(kernel_sets(DeviceType::CUDA).empty());  // no kernels take device tensors yet
}

TEST(KernelSet, RefusesAVariantSomeOpLacksOnTheDevice) {
  // The cuda variants stage host tensors (registered for the CPU) and cover some ops only.
  const std::string e = error_of([] { kernel_set(default_variant(DeviceType::CUDA)); });
  EXPECT_NE(e.find("kernel set 'cuda' has no cpu kernels for "), std::string::npos) << e;
  EXPECT_NE(e.find("moe"), std::string::npos) << e;
  EXPECT_EQ(e.find("embedding"), std::string::npos) << e;  // it has one of these
  EXPECT_NE(e.find("(kernel sets on cpu: cpu, reference)"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_ERROR_HAS(kernel_set("cpu", DeviceType::CUDA),
                   "kernel set 'cpu' has no cuda kernels for embedding, linear, rmsnorm");
  EXPECT_ERROR_HAS(kernel_set("cpu", DeviceType::CUDA), "(kernel sets on cuda: none)");
  EXPECT_ERROR_HAS(kernel_set("fast"), "kernel set 'fast' has no cpu kernels for embedding");
}
