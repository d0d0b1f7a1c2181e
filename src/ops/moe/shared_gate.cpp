// shared_gate_* on the CPU (shared_gate.h).
#include "ops/moe/shared_gate.h"

#include <cmath>

#include "core/threading.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

// Checks the device and that every tensor is f32 with `rows` * `cols` elements.
void check(const ExecContext& ctx, const char* who, int64_t rows, int64_t cols,
           std::initializer_list<const Tensor*> ts) {
  opcheck::host_context(ctx, who);
  for (const Tensor* t : ts)
    TITAN_CHECK(t->defined() && t->dtype() == DType::F32 && t->numel() == rows * cols, who, ": ",
                t->defined() ? t->str() : std::string("an undefined tensor"), " is not f32 of ", rows, " x ", cols,
                " elements");
}

}  // namespace

void shared_gate_forward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& extra,
                         const Tensor& e, Tensor& y, Tensor& s) {
  TITAN_CHECK(x.ndim() == 2, "shared_gate_forward: x must be [T, H], got ", x.str());
  const int64_t T = x.dim(0), H = x.dim(1);
  check(ctx, "shared_gate_forward", T, H, {&x, &e, &y});
  check(ctx, "shared_gate_forward", 1, H, {&w});
  check(ctx, "shared_gate_forward", T, 1, {&s});
  if (extra.defined()) check(ctx, "shared_gate_forward", T, 1, {&extra});
  const float* xp = x.data<float>();
  const float* wg = w.data<float>();
  const float* zp = extra.defined() ? extra.data<float>() : nullptr;
  float* gp = s.data<float>();
  float* yp = y.data<float>();
  const float* op = e.data<float>();
  parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      double z = zp ? double(zp[t]) : 0.0;
      for (int64_t h = 0; h < H; ++h) z += double(xp[t * H + h]) * double(wg[h]);
      const float g = float(1.0 / (1.0 + std::exp(-z)));
      gp[t] = g;
      for (int64_t h = 0; h < H; ++h) yp[t * H + h] += g * op[t * H + h];
    }
  });
}

void shared_gate_backward(const ExecContext& ctx, const Tensor& dy, const Tensor& e, const Tensor& s, Tensor& de,
                          Tensor& dz) {
  TITAN_CHECK(dy.ndim() == 2, "shared_gate_backward: dy must be [T, H], got ", dy.str());
  const int64_t T = dy.dim(0), H = dy.dim(1);
  check(ctx, "shared_gate_backward", T, H, {&dy, &e, &de});
  check(ctx, "shared_gate_backward", T, 1, {&s, &dz});
  const float* dyp = dy.data<float>();
  const float* op = e.data<float>();
  const float* gp = s.data<float>();
  float* dop = de.data<float>();
  float* dl = dz.data<float>();
  parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      double d = 0;
      for (int64_t h = 0; h < H; ++h) {
        d += double(dyp[t * H + h]) * double(op[t * H + h]);
        dop[t * H + h] = gp[t] * dyp[t * H + h];
      }
      dl[t] = float(d * double(gp[t]) * (1.0 - double(gp[t])));
    }
  });
}

void shared_gate_backward_input(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dz,
                                const Tensor& dxe, Tensor& dx, Tensor& dw) {
  TITAN_CHECK(x.ndim() == 2, "shared_gate_backward_input: x must be [T, H], got ", x.str());
  const int64_t T = x.dim(0), H = x.dim(1);
  check(ctx, "shared_gate_backward_input", T, H, {&x, &dxe, &dx});
  check(ctx, "shared_gate_backward_input", 1, H, {&w});
  check(ctx, "shared_gate_backward_input", T, 1, {&dz});
  if (dw.defined()) check(ctx, "shared_gate_backward_input", 1, H, {&dw});
  const float* xp = x.data<float>();
  const float* wg = w.data<float>();
  const float* dl = dz.data<float>();
  float* dxp = dx.data<float>();
  const float* dsp = dxe.data<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) dxp[t * H + h] += dsp[t * H + h] + dl[t] * wg[h];
  if (dw.defined()) {
    float* dwp = dw.data<float>();
    for (int64_t h = 0; h < H; ++h) {
      double acc = 0;
      for (int64_t t = 0; t < T; ++t) acc += double(dl[t]) * double(xp[t * H + h]);
      dwp[h] += float(acc);
    }
  }
}

}  // namespace titan
