// What the tests of the GPU registrations share (test_device_tensors.cpp, test_device_tensors_train.cpp):
// the device, its context, and the comparison of a GPU result with the cpu variant's on the host.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "common/test_util.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace titan::test {

inline const Device kGpu{DeviceType::CUDA, 0};

inline ExecContext gpu_context() {
  ExecContext c;
  c.device = kGpu;
  return c;
}

// got (a tensor that must have stayed on the GPU) against want (host), relative to want's peak.
inline void expect_gpu_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.device(), kGpu) << what << " did not stay on the GPU";
  EXPECT_LE(rel_err(got.to(cpu()), want), tol) << what;
}

}  // namespace titan::test
