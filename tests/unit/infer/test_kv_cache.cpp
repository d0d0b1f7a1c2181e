// The KV-cache logits source against transformers' generate(do_sample=False, use_cache=True) on a
// left-padded batch of three prompts of different lengths, 64 new tokens, for the dense and the
// MoE fixture models (tests/fixtures/kv_cache from tools/oracle/kv_cache_goldens.py): every
// greedy id identical and every step's logits within 1e-4; and against the recompute reference
// (the same logits without a cache); bf16 weights close to f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infer/batch.h"
#include "infer/cached_source.h"
#include "io/safetensors.h"
#include "model/hf_model.h"
#include "recompute_source.h"

using namespace titan;
using namespace titan::infer;

namespace {

struct Golden {
  std::vector<std::vector<uint32_t>> prompts;
  std::vector<std::vector<uint32_t>> ids;  // [rows][64]
  Tensor logits;                           // [64, rows, V]
  Tensor logits_f64;                       // Qwen3.5: the same from the model in float64 (else undefined)
};

Golden load_golden(const std::string& name) {
  SafetensorsFile f = SafetensorsFile::open(std::string(TITAN_FIXTURES) + "/kv_cache/" + name + ".safetensors");
  Golden g;
  for (int r = 0; f.contains("prompt_" + std::to_string(r)); ++r) {
    Tensor p = f.get("prompt_" + std::to_string(r));
    g.prompts.emplace_back(p.data<int64_t>(), p.data<int64_t>() + p.numel());
  }
  Tensor ids = f.get("ids");
  for (int64_t r = 0; r < ids.dim(0); ++r)
    g.ids.emplace_back(ids.data<int64_t>() + r * ids.dim(1), ids.data<int64_t>() + (r + 1) * ids.dim(1));
  g.logits = f.get("logits", DType::F32);
  if (f.contains("logits_f64")) g.logits_f64 = f.get("logits_f64", DType::F32);
  return g;
}

std::string model_dir(const std::string& name) {
  if (name == "qwen3_5_dense") return std::string(TITAN_FIXTURES) + "/qwen3_5/dense_lin_lin_full";
  if (name == "qwen3_5_moe") return std::string(TITAN_FIXTURES) + "/qwen3_5/moe_lin_full";
  return std::string(TITAN_FIXTURES) + (name == "dense" ? "/qwen3/untied_gqa2_long" : "/qwen3_moe/aux_norm");
}

uint32_t argmax(const float* x, int64_t n) { return uint32_t(std::max_element(x, x + n) - x); }

// Greedy decoding of the golden prompts through `src` (and `ref` alongside when given), as the
// decoding loop drives a source. Returns the largest |logit - golden| and, via ref_err, the
// largest |logit - reference logit| (the reference recomputes everything each call, so it is
// asked only every 7th step).
double greedy_run(LogitsSource& src, LogitsSource* ref, const Golden& g, std::vector<std::vector<uint32_t>>& out,
                  double* ref_err = nullptr, double* f64_err = nullptr) {
  const int64_t rows = int64_t(g.prompts.size()), V = src.vocab_size(), steps = g.logits.dim(0);
  LeftPaddedBatch batch = LeftPaddedBatch::make(g.prompts, 0);
  std::vector<float> lg(size_t(rows * V)), lr(size_t(rows * V));
  const std::vector<bool> active(size_t(rows), true);
  out.assign(size_t(rows), {});
  double worst = 0;
  for (int64_t step = 0; step < steps; ++step) {
    if (step == 0) {
      src.prefill(batch, lg.data());
      if (ref) ref->prefill(batch, lr.data());
    } else {
      src.decode_step(batch, active, lg.data());
      if (ref && step % 7 == 1) ref->decode_step(batch, active, lr.data());  // stateless: any steps
    }
    std::vector<uint32_t> next(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const float* gl = g.logits.data<float>() + (step * rows + r) * V;
      const float* g64 = f64_err ? g.logits_f64.data<float>() + (step * rows + r) * V : nullptr;
      for (int64_t v = 0; v < V; ++v) {
        worst = std::max(worst, double(std::fabs(lg[size_t(r * V + v)] - gl[v])));
        if (g64) *f64_err = std::max(*f64_err, double(std::fabs(lg[size_t(r * V + v)] - g64[v])));
        if (ref && (step == 0 || step % 7 == 1)) *ref_err = std::max(*ref_err, double(std::fabs(lg[size_t(r * V + v)] - lr[size_t(r * V + v)])));
      }
      next[size_t(r)] = argmax(lg.data() + r * V, V);
      out[size_t(r)].push_back(next[size_t(r)]);
    }
    batch.append(next, active);
  }
  return worst;
}

}  // namespace

TEST(InferenceState, GreedyBatchIsTokenIdenticalToTransformersWithLogitsWithin1e4) {
  for (const std::string name : {"dense", "moe"}) {
    SCOPED_TRACE(name);
    const Golden g = load_golden(name);
    ASSERT_EQ(g.prompts.size(), 3u);
    ASSERT_EQ(g.logits.dim(0), 64);
    auto model = load_hf_model(model_dir(name));
    CachedLogitsSource src(*model);
    RecomputeLogitsSource ref(*model);
    std::vector<std::vector<uint32_t>> ids;
    double ref_err = 0;
    const double err = greedy_run(src, &ref, g, ids, &ref_err);
    for (size_t r = 0; r < ids.size(); ++r) EXPECT_EQ(ids[r], g.ids[r]) << "row " << r;
    EXPECT_LT(err, 1e-4) << "largest |logit - transformers'|";
    EXPECT_LT(ref_err, 1e-4) << "largest |cached logit - recomputed logit|";
    std::printf("[ %s ] max |logit - HF| %.3g, max |cached - recomputed| %.3g\n", name.c_str(), err, ref_err);
    // The cache holds exactly the batch's columns.
    EXPECT_EQ(src.cache().len, int64_t(17 + 63));
  }
}

// Qwen3.5's left-padded batch: the prefill runs the chunked delta rule and the conv over rows with
// 32, 0 and 17 padding columns in front (zero inputs, state kept at zero through them, as
// transformers' masked hidden states leave it) and the full-attention layers' causal attention on
// each row's real columns, then the decode steps run the recurrence per row.
// These random models amplify f32 rounding (logits up to 9 in magnitude): over the 64 steps
// transformers' own f32 generate is up to 5.2e-5 from the float64 model's logits (its uncached
// f32 forward 8.1e-5), so the bounds are 2e-4 against both transformers' f32 logits and the
// float64 ones for the cpu kernels (measured 1.4e-4 at most), 1e-4 against float64 for the
// reference kernels (their delta rule in double: 7.4e-5); cached vs recomputed (two f32 routes) 1.9e-4,
// bound 4e-4; greedy ids identical.
TEST(InferenceState, Qwen3_5LeftPaddedBatchMatchesTransformers) {
  for (const std::string name : {"qwen3_5_dense", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    const Golden g = load_golden(name);
    ASSERT_EQ(g.prompts.size(), 3u);
    ASSERT_EQ(g.prompts[1].size(), 37u);
    ASSERT_EQ(g.logits.dim(0), 64);
    for (const char* kernels : {"cpu", "reference"}) {
      SCOPED_TRACE(kernels);
      auto model = load_hf_model(model_dir(name), kernels);
      CachedLogitsSource src(*model);
      RecomputeLogitsSource ref(*model);
      ASSERT_TRUE(g.logits_f64.defined());
      std::vector<std::vector<uint32_t>> ids;
      double ref_err = 0, f64_err = 0;
      const double err = greedy_run(src, &ref, g, ids, &ref_err, &f64_err);
      for (size_t r = 0; r < ids.size(); ++r) EXPECT_EQ(ids[r], g.ids[r]) << "row " << r;
      EXPECT_LT(f64_err, std::string(kernels) == "cpu" ? 2e-4 : 1e-4) << "largest |logit - transformers' float64 logit|";
      EXPECT_LT(err, 2e-4) << "largest |logit - transformers' f32 logit|";
      // two f32 routes (chunked prompt + recurrent steps, chunked whole rows), each within 2e-4 of float64
      EXPECT_LT(ref_err, 4e-4) << "largest |cached logit - recomputed logit|";
      std::printf("[ %s %s ] max |logit - HF f64| %.3g, max |logit - HF f32| %.3g, max |cached - recomputed| %.3g\n",
                  name.c_str(), kernels, f64_err, err, ref_err);
    }
  }
}

TEST(InferenceState, Bf16WeightsStayCloseToF32) {
  const Golden g = load_golden("dense");
  auto model = load_hf_model(model_dir("dense"));
  model->set_compute_dtype(DType::BF16);
  model->hold_compute_weights(true);
  CachedLogitsSource src(*model);
  LeftPaddedBatch batch = LeftPaddedBatch::make(g.prompts, 0);
  const int64_t V = src.vocab_size();
  std::vector<float> lg(size_t(3 * V));
  src.prefill(batch, lg.data());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < 3 * V; ++i) {
    worst = std::max(worst, double(std::fabs(lg[size_t(i)] - g.logits.data<float>()[i])));
    scale = std::max(scale, double(std::fabs(g.logits.data<float>()[i])));
  }
  std::printf("[ bf16 ] prefill logits: max |bf16 - f32 HF| %.3g (max |logit| %.3g)\n", worst, scale);
  EXPECT_LT(worst, 0.02 * scale);
  EXPECT_GT(worst, 0.0);  // the weights really were rounded
}

// Weights stored in bf16 (read from the f32 files straight into bf16, as titan generate --dtype
// bf16 loads them) compute exactly what f32 weights with bf16 compute and held bf16 copies do,
// for the dense and the MoE fixture, prefill and decode (a 3-row batch: the GEMV path); and the
// model holds no f32 matmul weight and no gradient.
TEST(InferenceState, Bf16StoredWeightsEqualHeldBf16Copies) {
  for (const std::string name : {"dense", "moe"}) {
    SCOPED_TRACE(name);
    const Golden g = load_golden(name);
    auto f32w = load_hf_model(model_dir(name));
    f32w->set_compute_dtype(DType::BF16);
    f32w->hold_compute_weights(true);
    auto bf16w = load_hf_model(model_dir(name), "cpu", /*frozen=*/true, DType::BF16);
    EXPECT_EQ(bf16w->compute_dtype(), DType::BF16);
    int64_t bf16_values = 0;
    for (const auto& p : bf16w->params().all()) {
      EXPECT_FALSE(p.grad.defined()) << p.name;
      const bool matmul = p.name.find("_proj.weight") != std::string::npos || p.name == "lm_head.weight";
      EXPECT_EQ(p.value.dtype(), matmul ? DType::BF16 : DType::F32) << p.name;
      bf16_values += matmul ? 1 : 0;
    }
    EXPECT_GT(bf16_values, 0);
    // Scoring (titan eval's forward; the dense fixture's lm_head is untied, so stored in bf16).
    const std::vector<uint32_t>& p = g.prompts[1];
    const int64_t S = int64_t(p.size()) - 1;
    Tensor ids = Tensor::empty({1, S}, DType::I64), labels = Tensor::empty({1, S}, DType::I64);
    for (int64_t i = 0; i < S; ++i) ids.data<int64_t>()[i] = p[size_t(i)], labels.data<int64_t>()[i] = p[size_t(i + 1)];
    EXPECT_EQ(f32w->forward(ids, labels), bf16w->forward(ids, labels));
    CachedLogitsSource a(*f32w), b(*bf16w);
    std::vector<std::vector<uint32_t>> ia, ib;
    const double ea = greedy_run(a, nullptr, g, ia), eb = greedy_run(b, nullptr, g, ib);
    EXPECT_EQ(ia, ib);
    EXPECT_EQ(ea, eb) << "the same logits give the same largest difference to the golden";
  }
}

// The KV cache follows the matmuls' compute dtype: f32 for an f32 model, bf16 for bf16 weights.
// Ten decode steps on the golden's own ids (teacher-forced, so the rows stay comparable) read the
// bf16 cache and stay near transformers' f32 logits (measured: 0.090 of max |logit| 4.5; the same
// steps with bf16 weights and an f32 cache 0.083; the prefill alone 0.051).
TEST(InferenceState, Bf16ComputeKeepsTheKvCacheInBf16) {
  const Golden g = load_golden("dense");
  for (const DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto model = load_hf_model(model_dir("dense"), "cpu", /*frozen=*/true, dt);
    CachedLogitsSource src(*model);
    LeftPaddedBatch batch = LeftPaddedBatch::make(g.prompts, 0);
    const int64_t rows = int64_t(g.prompts.size()), V = src.vocab_size();
    const std::vector<bool> active(size_t(rows), true);
    std::vector<float> lg(size_t(rows * V));
    double worst = 0, scale = 0;
    for (int64_t step = 0; step < 10; ++step) {
      if (step == 0)
        src.prefill(batch, lg.data());
      else
        src.decode_step(batch, active, lg.data());
      const float* gl = g.logits.data<float>() + step * rows * V;
      for (int64_t i = 0; i < rows * V; ++i) {
        worst = std::max(worst, double(std::fabs(lg[size_t(i)] - gl[i])));
        scale = std::max(scale, double(std::fabs(gl[i])));
      }
      std::vector<uint32_t> next;
      for (int64_t r = 0; r < rows; ++r) next.push_back(g.ids[size_t(r)][size_t(step)]);
      batch.append(next, active);
    }
    int64_t kv_layers = 0;
    for (const LayerState& st : src.cache().layers) {
      if (!st.k.defined()) continue;
      EXPECT_EQ(st.k.dtype(), dt);
      EXPECT_EQ(st.v.dtype(), dt);
      ++kv_layers;
    }
    EXPECT_GT(kv_layers, 0);
    std::printf("[ %s ] 10 steps: max |logit - f32 HF| %.3g (max |logit| %.3g)\n", dtype_name(dt), worst, scale);
    EXPECT_LT(worst, dt == DType::F32 ? 1e-4 : 0.03 * scale);
  }
}

TEST(InferenceState, Bf16WeightsNeedAFrozenModel) {
  auto model = load_hf_model(model_dir("dense"));
  EXPECT_THROW(DecoderModel(model->config(), "cpu", false, /*frozen=*/false, DType::BF16), Error);
  DecoderModel m(model->config(), "cpu", false, true, DType::BF16);
  EXPECT_THROW(m.set_compute_dtype(DType::F32), Error);
}

TEST(InferenceState, DecodeWithoutPrefillIsAnError) {
  auto model = load_hf_model(model_dir("dense"));
  CachedLogitsSource src(*model);
  LeftPaddedBatch batch = LeftPaddedBatch::make({{1, 2, 3}}, 0);
  std::vector<float> lg(size_t(src.vocab_size()));
  try {
    src.decode_step(batch, {true}, lg.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decode_step without prefill"), std::string::npos);
  }
}
