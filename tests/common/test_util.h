// Helpers shared by every unit test executable (tests/unit/<area>/), linked in as the static
// library titan_test_common: the message of an expected error, a fresh scratch folder, seeded
// random tensors, and the error of a tensor relative to its reference's scale.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"

namespace titan::test {

// The message of the titan::Error `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f);

// A fresh, empty folder <system temp>/titan_test_<name>_<pid> (removed first if it exists), removed
// again when the test process exits (kept when TITAN_KEEP_TEST_DIRS is set).
std::string temp_dir(const std::string& name);

// An f32 tensor of normal values (mean, std) drawn from Philox{seed, 7}.
Tensor randn(const Shape& shape, uint64_t seed, double std = 1.0, double mean = 0.0);

// max |a - r| / max |r| over all elements of two f32 tensors: the error relative to the tensor's
// scale (elementwise relative error is meaningless for entries that cancel to near zero); a
// reference that is exactly zero everywhere is measured against 1.
double rel_err(const Tensor& a, const Tensor& r);

}  // namespace titan::test

// Expects `stmt` to throw a titan::Error whose message contains `needle`.
#define EXPECT_ERROR_HAS(stmt, needle)                                                     \
  do {                                                                                     \
    const std::string msg_ = ::titan::test::error_of([&] { stmt; });                       \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "error: " << (msg_.empty() ? "(none)" : msg_); \
  } while (0)
