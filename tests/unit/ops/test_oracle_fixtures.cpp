// The RoPE cache and AdamW against values produced by transformers / torch
// (tools/oracle/ops_fixtures.py, committed under tests/fixtures/ops).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/adamw/adamw.h"
#include "ops/rope/rope.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

namespace {

nlohmann::json load(const std::string& name) {
  const std::string path = std::string(TITAN_FIXTURES) + "/ops/" + name;
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open fixture " + path);
  return nlohmann::json::parse(f);
}

std::vector<float> f32s(const nlohmann::json& a) {
  std::vector<float> v;
  for (const auto& x : a) v.push_back(float(x.get<double>()));
  return v;
}

Tensor tensor_of(const std::vector<float>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::F32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::fabs(t.data<float>()[i])));
  return m;
}

// Distance in units in the last place between two f32 values of the same sign.
int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if ((a < 0) != (b < 0)) return 1 << 30;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(int64_t(ia) - int64_t(ib));
}

}  // namespace

TEST(OracleFixtures, RopeCacheMatchesHFQwen3RotaryEmbedding) {
  const nlohmann::json j = load("rope_hf.json");
  for (const auto& c : j["cases"]) {
    const int64_t D = c["head_dim"].get<int64_t>();
    const double theta = c["theta"].get<double>();
    const std::vector<int64_t> pos = c["positions"].get<std::vector<int64_t>>();
    const std::vector<float> inv_hf = f32s(c["inv_freq"]), cos_hf = f32s(c["cos"]), sin_hf = f32s(c["sin"]);
    const RopeCache cache = make_rope_cache(theta, D, pos.back() + 1);
    // inv_freq as rope_cache.cpp forms it: torch's f32 pow is within an ulp of the correctly rounded
    // one used there, so at most a stray value differs, by one ulp.
    std::vector<float> inv(size_t(D / 2));
    int64_t inv_diff = 0;
    for (int64_t i = 0; i < D / 2; ++i) {
      inv[size_t(i)] = 1.0f / float(std::pow(double(float(theta)), double(float(2 * i) / float(D))));
      ASSERT_LE(ulps(inv[size_t(i)], inv_hf[size_t(i)]), 1) << "inv_freq D=" << D << " i=" << i;
      inv_diff += inv[size_t(i)] != inv_hf[size_t(i)];
    }
    EXPECT_LE(inv_diff, 1) << "D=" << D << " theta=" << theta;
    int64_t exact = 0, total = 0;
    for (size_t k = 0; k < pos.size(); ++k)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t i = d % (D / 2);
        const float ours_c = cache.cos.data<float>()[pos[k] * D + d], ours_s = cache.sin.data<float>()[pos[k] * D + d];
        const float hf_c = cos_hf[k * size_t(D) + size_t(d)], hf_s = sin_hf[k * size_t(D) + size_t(d)];
        exact += (ours_c == hf_c) + (ours_s == hf_s);
        total += 2;
        // The angle p * inv_freq is the same f32 product; where inv_freq differs, the angles differ
        // by p * that difference (plus the product's rounding), and cos/sin by at most as much.
        const double angle_diff =
            double(pos[k]) * std::fabs(double(inv[size_t(i)]) - inv_hf[size_t(i)]) * 1.01 +
            (inv[size_t(i)] != inv_hf[size_t(i)] ? std::ldexp(std::fabs(double(pos[k]) * inv_hf[size_t(i)]), -23) : 0.0);
        const std::string at = " D=" + std::to_string(D) + " p=" + std::to_string(pos[k]) + " d=" + std::to_string(d);
        ASSERT_LE(std::fabs(double(ours_c) - hf_c), angle_diff + 2 * std::ldexp(1.0, -24)) << "cos" << at;
        ASSERT_LE(std::fabs(double(ours_s) - hf_s), angle_diff + 2 * std::ldexp(1.0, -24)) << "sin" << at;
        if (angle_diff == 0) {
          ASSERT_LE(ulps(ours_c, hf_c), 1) << "cos" << at << ": " << ours_c << " vs " << hf_c;
          ASSERT_LE(ulps(ours_s, hf_s), 1) << "sin" << at << ": " << ours_s << " vs " << hf_s;
        }
      }
    EXPECT_GE(double(exact), 0.9 * double(total)) << "D=" << D << " theta=" << theta << ": " << exact << "/" << total;
    std::printf("rope D=%lld theta=%g: %lld/%lld cos/sin values bitwise equal to HF, inv_freq differs in %lld\n",
                (long long)D, theta, (long long)exact, (long long)total, (long long)inv_diff);
  }
}

TEST(OracleFixtures, AdamWMatchesTorch) {
  const nlohmann::json j = load("adamw_torch.json");
  for (const auto& c : j["cases"]) {
    AdamWParams hp;
    hp.lr = float(c["lr"].get<double>());
    hp.beta1 = float(c["beta1"].get<double>());
    hp.beta2 = float(c["beta2"].get<double>());
    hp.eps = float(c["eps"].get<double>());
    hp.weight_decay = float(c["weight_decay"].get<double>());
    const std::vector<float> p0 = f32s(c["param0"]);
    const int64_t n = int64_t(p0.size());
    for (const char* variant : {"reference", "cpu"}) {
      const auto& k = kernel<AdamWKernel>(variant);
      Tensor p = tensor_of(p0), m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
      for (size_t t = 0; t < c["grads"].size(); ++t) {
        hp.step = int64_t(t) + 1;
        k.step(ExecContext::host(), p, tensor_of(f32s(c["grads"][t])), m, v, hp);
        const auto& want = c["steps"][t];
        const Tensor wp = tensor_of(f32s(want["param"])), wm = tensor_of(f32s(want["exp_avg"])),
                     wv = tensor_of(f32s(want["exp_avg_sq"]));
        const std::string what = std::string(variant) + " lr " + std::to_string(hp.lr) + " step " + std::to_string(t + 1);
        if (std::string(variant) == "cpu") {
          // The same f32 operations in the same order as torch's vectorized single-tensor path:
          // the moments agree bitwise; p within two ulps: torch's sqrt (MKL, ~0.75 ulp) can be one ulp
          // off the correctly rounded one, which moves the update by an ulp of itself.
          EXPECT_TRUE(bitwise_equal(m, wm)) << what << ": " << close(m, wm, 0, 0).message();
          EXPECT_TRUE(bitwise_equal(v, wv)) << what << ": " << close(v, wv, 0, 0).message();
          for (int64_t i = 0; i < n; ++i)
            ASSERT_LE(ulps(p.data<float>()[i], wp.data<float>()[i]), 2) << what << " element " << i;
          p.copy_(wp);  // continue from torch's p, so each step is judged on its own
        } else {
          // double evaluation vs torch's f32 roundings: m = b1 m + (1 - b1) g cancels when g
          // changes scale, so compare against the tensor's scale rather than elementwise.
          EXPECT_TRUE(close(p, wp, 1e-6, 1e-6)) << what;
          EXPECT_TRUE(close(m, wm, 1e-6 * max_abs(wm), 0)) << what;
          EXPECT_TRUE(close(v, wv, 1e-6 * max_abs(wv), 0)) << what;
        }
      }
    }
  }
}
