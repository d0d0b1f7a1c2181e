#include "train/grad_utils.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/threading.h"
#include "distributed/grad_clip.h"

namespace titan {
namespace {

constexpr int64_t kChunk = 1 << 16;  // elements per task of the non-finite scan

// Any element with all exponent bits set (Inf or NaN)? Integer ops only, so it vectorizes.
bool has_non_finite_f32(const uint32_t* p, int64_t n) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= uint32_t((p[i] & 0x7f800000u) == 0x7f800000u);
  return any != 0;
}
bool has_non_finite_16(const uint16_t* p, int64_t n, uint16_t exp_mask) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= uint32_t((p[i] & exp_mask) == exp_mask);
  return any != 0;
}

}  // namespace

std::vector<distributed::GradRange> grad_ranges(const std::vector<NamedTensor>& ts, const char* what) {
  std::vector<distributed::GradRange> rs;
  for (auto& t : ts) {
    TITAN_CHECK(t.tensor.defined(), what, ": tensor '", t.name, "' is undefined");
    TITAN_CHECK(t.tensor.dtype() == DType::F32, what, ": tensor '", t.name, "' is ", dtype_name(t.tensor.dtype()),
                ", expected f32");
    TITAN_CHECK(t.tensor.device() == ts.front().tensor.device(), what, ": tensor '", t.name, "' is on ",
                t.tensor.device().str(), ", tensor '", ts.front().name, "' on ", ts.front().tensor.device().str(),
                " (one call's ranges live on one device)");
    // raw(): a GPU tensor's device pointer, for a cuda:0 context (a Tensor is a view: const only the handle).
    rs.push_back({static_cast<float*>(t.tensor.raw()), t.tensor.numel()});
  }
  return rs;
}

double global_l2_norm(const std::vector<NamedTensor>& grads) {
  ExecContext ctx;  // where the gradients live: the host, or cuda:0
  if (!grads.empty() && grads.front().tensor.defined()) ctx.device = grads.front().tensor.device();
  return std::sqrt(distributed::sum_of_squares(ctx, grad_ranges(grads, "gradient norm")));
}

std::optional<std::string> first_non_finite(const std::vector<NamedTensor>& tensors) {
  for (auto& t : tensors) {
    if (!t.tensor.defined()) continue;
    DType dt = t.tensor.dtype();
    if (dt != DType::F32 && dt != DType::BF16 && dt != DType::F16) continue;  // integers are always finite
    // A GPU tensor is scanned in a host copy: this runs only on the error path (a non-finite norm).
    const Tensor host = t.tensor.device().type == DeviceType::CPU ? t.tensor : t.tensor.to(cpu());
    int64_t n = host.numel();
    std::atomic<bool> bad{false};
    parallel_for(n, kChunk, [&](int64_t b, int64_t e) {
      if (bad.load(std::memory_order_relaxed)) return;
      bool found = false;
      if (dt == DType::F32)
        found = has_non_finite_f32(static_cast<const uint32_t*>(host.raw()) + b, e - b);
      else
        found = has_non_finite_16(static_cast<const uint16_t*>(host.raw()) + b, e - b,
                                  dt == DType::BF16 ? uint16_t(0x7f80) : uint16_t(0x7c00));
      if (found) bad.store(true, std::memory_order_relaxed);
    });
    if (bad.load()) return t.name;
  }
  return std::nullopt;
}

}  // namespace titan
