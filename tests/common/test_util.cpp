#include "common/test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace titan::test {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

namespace {

// The folders temp_dir made in this process, removed when it exits (a training test leaves
// checkpoints of up to a GiB each: a few runs of the suite filled the disk), unless
// TITAN_KEEP_TEST_DIRS is set, to look at them after a failure.
struct TempDirs {
  std::mutex mu;
  std::vector<std::filesystem::path> made;
  ~TempDirs() {
    if (std::getenv("TITAN_KEEP_TEST_DIRS")) return;
    std::error_code ec;
    for (const auto& p : made) std::filesystem::remove_all(p, ec);
  }
};
TempDirs& temp_dirs() {
  static TempDirs d;
  return d;
}

}  // namespace

std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path p = fs::temp_directory_path() / ("titan_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  TempDirs& d = temp_dirs();
  std::lock_guard<std::mutex> lock(d.mu);
  d.made.push_back(p);
  return p.string();
}

Tensor randn(const Shape& shape, uint64_t seed, double std, double mean) {
  Tensor t = Tensor::empty(shape, DType::F32);
  fill_normal(t, mean, std, Philox{seed, 7});
  return t;
}

double rel_err(const Tensor& a, const Tensor& r) {
  TITAN_CHECK(a.numel() == r.numel(), "rel_err: sizes differ: ", a.str(), " vs ", r.str());
  double num = 0, den = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    num = std::max(num, std::fabs(double(a.data<float>()[i]) - double(r.data<float>()[i])));
    den = std::max(den, std::fabs(double(r.data<float>()[i])));
  }
  return num / (den > 0 ? den : 1.0);
}

}  // namespace titan::test
