// Both attention kernels against goldens from Hugging Face transformers' eager attention
// (tools/oracle/attention_fixture.py -> tests/fixtures/ops/attention_hf.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/test_util.h"
#include "core/tensor.h"
#include "ops/attention/attention.h"

using namespace titan;
using namespace titan::test;

namespace {

Tensor from_json(const nlohmann::json& values, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  EXPECT_EQ(int64_t(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel() && i < int64_t(values.size()); ++i)
    t.data<float>()[i] = values[size_t(i)].get<float>();
  return t;
}

}  // namespace

TEST(AttentionHF, KernelsMatchTransformersEagerAttention) {
  const std::string path = std::string(TITAN_FIXTURES) + "/ops/attention_hf.json";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing fixture " << path;
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_GE(doc.at("cases").size(), 1u);
  for (const auto& c : doc.at("cases")) {
    const int64_t B = c.at("B"), S = c.at("S"), Hq = c.at("Hq"), Hkv = c.at("Hkv"), D = c.at("D");
    const float scale = c.at("scale");
    const Tensor q = from_json(c.at("q"), {B, S, Hq, D}), k = from_json(c.at("k"), {B, S, Hkv, D});
    const Tensor v = from_json(c.at("v"), {B, S, Hkv, D}), dout = from_json(c.at("dout"), {B, S, Hq, D});
    const Tensor out = from_json(c.at("out"), {B, S, Hq, D}), lse = from_json(c.at("lse"), {B, Hq, S});
    const Tensor dq = from_json(c.at("dq"), {B, S, Hq, D}), dk = from_json(c.at("dk"), {B, S, Hkv, D});
    const Tensor dv = from_json(c.at("dv"), {B, S, Hkv, D});
    for (const char* variant : {"reference", "cpu"}) {
      const AttentionKernel& kern = kernel<AttentionKernel>(variant);
      Tensor o, l, gq, gk, gv;
      kern.forward(ExecContext::host(), q, k, v, scale, o, l);
      kern.backward(ExecContext::host(), q, k, v, o, l, dout, scale, gq, gk, gv);
      const std::string what = std::string(variant) + " S=" + std::to_string(S) + " Hq=" + std::to_string(Hq) +
                               " Hkv=" + std::to_string(Hkv) + " D=" + std::to_string(D);
      // The golden's softmax ran in float32 (HF casts it), so agreement is at f32 precision.
      EXPECT_LE(rel_err(o, out), 1e-6) << what << " out";
      EXPECT_LE(rel_err(l, lse), 1e-6) << what << " lse";
      EXPECT_LE(rel_err(gq, dq), 5e-6) << what << " dq";
      EXPECT_LE(rel_err(gk, dk), 5e-6) << what << " dk";
      EXPECT_LE(rel_err(gv, dv), 5e-6) << what << " dv";
    }
  }
}
