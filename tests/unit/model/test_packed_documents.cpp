// Block-causal packing: a packed row's logits and gradients equal those of its documents run one
// by one (each a sequence of its own at positions 0..n-1), on both kernel sets, dense and MoE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "model/positions.h"
#include "model/decoder.h"

using namespace titan;

namespace {

Tensor i64(const Shape& s) { return Tensor::empty(s, DType::I64); }

// max |a - b| / max |b| over a tensor.
double rel(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / (den > 0 ? den : 1.0);
}

void check_packed_equals_one_by_one(const ModelConfig& c, const char* variant) {
  SCOPED_TRACE(variant);
  const int64_t B = 2, S = 40;
  const std::vector<std::vector<int64_t>> docs = {{7, 20, 13}, {1, 39}};  // lengths per row
  Tensor ids = i64({B, S}), labels = i64({B, S}), pos = i64({B, S});
  for (int64_t i = 0; i < B * S; ++i) {
    ids.data<int64_t>()[i] = (i * 37 + 11) % c.vocab_size;
    labels.data<int64_t>()[i] = i % 5 == 0 ? -100 : (i * 53 + 5) % c.vocab_size;
  }
  for (int64_t b = 0, i = 0; b < B; ++b)
    for (int64_t n : docs[size_t(b)])
      for (int64_t p = 0; p < n; ++p) pos.data<int64_t>()[i++] = p;

  DecoderModel packed(c, variant), alone(c, variant);
  packed.init_weights(InitScheme::HF, 5);
  alone.init_weights(InitScheme::HF, 5);
  Tensor logits = Tensor::empty({B * S, c.vocab_size}, DType::F32);
  const double loss_packed = packed.forward(ids, labels, &logits, &pos);
  packed.forward_backward(ids, labels, 1.0f, &pos);

  double loss_alone = 0;
  int64_t row0 = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t a = 0;
    for (int64_t n : docs[size_t(b)]) {
      Tensor di = i64({1, n}), dl = i64({1, n});
      std::copy_n(ids.data<int64_t>() + b * S + a, n, di.data<int64_t>());
      std::copy_n(labels.data<int64_t>() + b * S + a, n, dl.data<int64_t>());
      Tensor lg = Tensor::empty({n, c.vocab_size}, DType::F32);
      loss_alone += alone.forward(di, dl, &lg);
      alone.forward_backward(di, dl, 1.0f);
      const int64_t V = c.vocab_size;
      EXPECT_LE(rel(logits.data<float>() + (row0 + a) * V, lg.data<float>(), n * V), 1e-5) << "row " << b << " doc at " << a;
      a += n;
    }
    row0 += S;
  }
  EXPECT_NEAR(loss_packed, loss_alone, 1e-5 * std::fabs(loss_alone));
  double worst = 0;
  const auto& gp = packed.params().all();
  const auto& ga = alone.params().all();
  ASSERT_EQ(gp.size(), ga.size());
  for (size_t i = 0; i < gp.size(); ++i) {
    const double r = rel(gp[i].grad.data<float>(), ga[i].grad.data<float>(), gp[i].grad.numel());
    EXPECT_LE(r, 1e-5) << gp[i].name;
    worst = std::max(worst, r);
  }
  std::printf("%s: loss %.9g packed vs %.9g one by one; worst gradient difference %.2e (relative to max)\n", variant,
              loss_packed, loss_alone, worst);
}

}  // namespace

TEST(PackedDocuments, PackedRowEqualsItsDocumentsOneByOne) {
  ModelConfig c = flavor_config("debug-tiny");
  for (const char* variant : {"cpu", "reference"}) check_packed_equals_one_by_one(c, variant);
}

TEST(PackedDocuments, MoEPackedRowEqualsItsDocumentsOneByOne) {
  ModelConfig c = flavor_config("debug-moe");
  c.vocab_size = 512;  // the routing is what this case adds; a small head and two layers keep it quick
  c.num_hidden_layers = 2;
  check_packed_equals_one_by_one(c, "cpu");
}

TEST(PackedDocuments, PositionsRestartAfterTheSeparatorAndBadPositionsAreRefused) {
  Tensor ids = i64({1, 6});
  const int64_t t[] = {5, 9, 0, 4, 0, 0};  // separator 0
  std::copy_n(t, 6, ids.data<int64_t>());
  Tensor pos = positions_after_separator(ids, 0);
  const std::vector<int64_t> want{0, 1, 2, 0, 1, 0};
  EXPECT_EQ(std::vector<int64_t>(pos.data<int64_t>(), pos.data<int64_t>() + 6), want);
  EXPECT_EQ(document_starts(&pos, ids), (std::vector<int64_t>{0, 0, 0, 3, 3, 5}));
  pos.data<int64_t>()[4] = 3;
  EXPECT_THROW(document_starts(&pos, ids), std::exception);
}
