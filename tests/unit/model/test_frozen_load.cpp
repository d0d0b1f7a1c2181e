// A frozen (inference) model loads without a second copy (model/hf_model.h): every parameter
// equals the copying load bit for bit, a parameter that is one whole stored tensor in its own
// dtype is a view of the mapped file, the fused q/k/v and gate/up buffers are copies (their file
// pages given back, which must not disturb the views next to them), and bf16 weights hold the
// f32 values rounded once.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "model/hf_model.h"
#include "ops/matmul/bf16_convert.h"

using namespace titan;

namespace {

std::string fixture(const std::string& rel) { return std::string(TITAN_FIXTURES) + "/" + rel; }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

bool fused(const std::string& name) {
  for (const char* p : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})
    if (name.find(p) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(FrozenLoad, ViewsOfTheFileWhereDtypesAgreeAndEqualToTheCopyingLoad) {
  for (const std::string dir : {"qwen3/tied_gqa2_hd16", "qwen3/untied_gqa1"}) {
    SCOPED_TRACE(dir);
    auto copied = load_hf_model(fixture(dir));
    auto frozen = load_hf_model(fixture(dir), "cpu", /*frozen=*/true);
    const auto& want = copied->params().all();
    const auto& got = frozen->params().all();
    ASSERT_EQ(want.size(), got.size());
    int views = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(got[i].name);
      EXPECT_TRUE(same_bits(got[i].value, want[i].value));
      EXPECT_FALSE(want[i].value.is_borrowed());
      // The fixture's tensors are f32, as the model holds them: views unless fused.
      EXPECT_EQ(got[i].value.is_borrowed(), !fused(got[i].name));
      views += got[i].value.is_borrowed();
    }
    EXPECT_GT(views, 0);
  }
}

TEST(FrozenLoad, Bf16WeightsAreTheF32ValuesRoundedOnce) {
  const std::string dir = fixture("qwen3/tied_gqa2_hd16");
  auto f32 = load_hf_model(dir);
  auto bf16 = load_hf_model(dir, "cpu", /*frozen=*/true, DType::BF16);
  const auto& want = f32->params().all();
  const auto& got = bf16->params().all();
  ASSERT_EQ(want.size(), got.size());
  int rounded = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(got[i].name);
    if (got[i].value.dtype() == DType::BF16) {
      EXPECT_TRUE(same_bits(got[i].value, to_bf16(want[i].value)));
      ++rounded;
    } else {
      EXPECT_TRUE(same_bits(got[i].value, want[i].value));
    }
  }
  EXPECT_GT(rounded, 0);
}
