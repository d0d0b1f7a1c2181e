// Kernel replacement by module name pattern: the glob, rule parsing, and the errors (no match,
// unknown kernel, wrong op, refused constraint), on an abstract module list and on a 4-layer
// dense DecoderModel (one log line per replaced module, then a total).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "model/decoder.h"
#include "model/replace.h"
#include "ops/moe/moe.h"

using namespace titan;
using namespace titan::test;

namespace {

// A test-only MoE variant with a shape constraint, to see a refusal at start-up (it computes with
// the reference, so `verify kernels` in this binary still passes it).
std::string needs_seq64(const KernelShape& s) {
  return s.seq % 64 == 0 ? "" : "sequence length " + std::to_string(s.seq) + " is not a multiple of 64";
}
void fwd(const ExecContext& ctx, const MoEArgs& a, Tensor& y, MoESaved& s) {
  kernel<MoEKernel>("reference").forward(ctx, a, y, s);
}
void bwd(const ExecContext& ctx, const MoEArgs& a, const MoESaved& s, const Tensor& dy, const MoEGrads& g) {
  kernel<MoEKernel>("reference").backward(ctx, a, s, dy, g);
}
const MoEKernel kSeq64{"test_seq64", fwd, bwd, needs_seq64};
TITAN_REGISTER_KERNEL(MoEKernel, "test_seq64", DeviceType::CPU, kSeq64);

TEST(ModulePattern, GlobSemantics) {
  EXPECT_TRUE(module_pattern_match("model.layers.*.mlp", "model.layers.0.mlp"));
  EXPECT_TRUE(module_pattern_match("model.layers.*.mlp", "model.layers.17.mlp"));
  EXPECT_FALSE(module_pattern_match("model.layers.*.mlp", "model.layers.1.x.mlp"));  // * stops at dots
  EXPECT_FALSE(module_pattern_match("model.layers.*.mlp", "model.layers.1.mlp.extra"));  // whole name
  EXPECT_TRUE(module_pattern_match("model.layers.1*.mlp", "model.layers.12.mlp"));
  EXPECT_FALSE(module_pattern_match("model.layers.1*.mlp", "model.layers.2.mlp"));
  EXPECT_TRUE(module_pattern_match("**.rope", "model.layers.3.self_attn.rope"));
  EXPECT_TRUE(module_pattern_match("model.**", "model.layers.3.self_attn.rope"));
  EXPECT_FALSE(module_pattern_match("*.rope", "model.layers.3.self_attn.rope"));
  EXPECT_TRUE(module_pattern_match("model.layers.3.mlp", "model.layers.3.mlp"));
  EXPECT_FALSE(module_pattern_match("model.layers.3.mlp", "model.layers.31.mlp"));
  EXPECT_TRUE(module_pattern_match("*", "lm_head"));
  // Character classes: one character of the set.
  EXPECT_TRUE(module_pattern_match("model.layers.*.self_attn.[qkvo]_proj", "model.layers.2.self_attn.k_proj"));
  EXPECT_TRUE(module_pattern_match("model.layers.*.self_attn.[qkvo]_proj", "model.layers.2.self_attn.o_proj"));
  EXPECT_FALSE(module_pattern_match("model.layers.*.self_attn.[qkv]_proj", "model.layers.2.self_attn.o_proj"));
  EXPECT_FALSE(module_pattern_match("model.layers.*.self_attn.[qkv]_proj", "model.layers.2.self_attn.qk_proj"));
  EXPECT_TRUE(module_pattern_match("model.layers.[13].mlp", "model.layers.3.mlp"));
  EXPECT_FALSE(module_pattern_match("model.layers.[13].mlp", "model.layers.2.mlp"));
}

TEST(ReplaceRule, Parses) {
  const ReplaceRule r = parse_replace_rule("model.layers.*.self_attn.rope=rope.transposed");
  EXPECT_EQ(r.pattern, "model.layers.*.self_attn.rope");
  EXPECT_EQ(r.op, "rope");
  EXPECT_EQ(r.variant, "transposed");
  EXPECT_THROW(parse_replace_rule("model.layers.*.mlp"), Error);
  EXPECT_THROW(parse_replace_rule("=rope.transposed"), Error);
  EXPECT_THROW(parse_replace_rule("a=rope"), Error);
  EXPECT_THROW(parse_replace_rule("a=b=rope.transposed"), Error);
}

ModelConfig four_layers() {
  ModelConfig c = flavor_config("debug-tiny");
  c.num_hidden_layers = 4;
  return c;
}

TEST(Replace, RopeOnFourLayersLogsFourLinesAndATotal) {
  DecoderModel model(four_layers(), "reference");
  auto modules = decoder_kernel_modules(model, 2, 16);
  std::vector<std::string> log;
  const auto done = apply_kernel_replacements(modules, {"model.layers.*.self_attn.rope=rope.transposed"}, &log);
  ASSERT_EQ(done.size(), 4u);
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[0], "[kernels] model.layers.0.self_attn.rope: rope.reference -> rope.transposed");
  EXPECT_EQ(log[3], "[kernels] model.layers.3.self_attn.rope: rope.reference -> rope.transposed");
  EXPECT_EQ(log[4], "[kernels] 4 module(s) replaced by 1 rule(s)");
  for (int64_t l = 0; l < 4; ++l) EXPECT_STREQ(model.layer_kernels(l).rope->variant, "transposed");
  EXPECT_STREQ(model.layer_kernels(0).attention->variant, "reference");
}

// rope.fused, the first name of rope.transposed, still selects it; the log names the variant.
TEST(Replace, FusedAliasSelectsTransposedRope) {
  DecoderModel model(four_layers(), "reference");
  auto modules = decoder_kernel_modules(model, 2, 16);
  std::vector<std::string> log;
  const auto done = apply_kernel_replacements(modules, {"model.layers.1.self_attn.rope=rope.fused"}, &log);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].to, "transposed");
  EXPECT_EQ(log[0], "[kernels] model.layers.1.self_attn.rope: rope.reference -> rope.transposed");
  EXPECT_STREQ(model.layer_kernels(1).rope->variant, "transposed");
  EXPECT_STREQ(model.layer_kernels(0).rope->variant, "reference");
}

TEST(Replace, NarrowPatternPicksOneLayerAndLaterRulesWin) {
  DecoderModel model(four_layers(), "reference");
  auto modules = decoder_kernel_modules(model);
  std::vector<std::string> log;
  apply_kernel_replacements(modules,
                            {"model.layers.*.self_attn.attention=attention.cpu",
                             "model.layers.2.self_attn.attention=attention.reference"},
                            &log);
  EXPECT_STREQ(model.layer_kernels(0).attention->variant, "cpu");
  EXPECT_STREQ(model.layer_kernels(2).attention->variant, "reference");
  EXPECT_STREQ(model.layer_kernels(3).attention->variant, "cpu");
  EXPECT_EQ(log.back(), "[kernels] 4 module(s) replaced by 2 rule(s)");
}

TEST(Replace, ErrorsLeaveTheModelUntouched) {
  DecoderModel model(four_layers(), "reference");
  auto modules = decoder_kernel_modules(model, 1, 8);
  auto attempt = [&](std::vector<std::string> rules) {
    return error_of([&] { apply_kernel_replacements(modules, rules); });
  };
  std::string e = attempt({"model.layers.*.self_attn.rope=rope.transposed", "model.layers.9.mlp=swiglu.reference"});
  EXPECT_NE(e.find("matches no module"), std::string::npos) << e;
  e = attempt({"model.layers.*.self_attn.rope=rope.nosuch"});
  EXPECT_NE(e.find("unknown kernel rope.nosuch"), std::string::npos) << e;
  EXPECT_NE(e.find("rope.transposed"), std::string::npos) << e;  // lists the known ones
  e = attempt({"model.layers.*.self_attn.rope=nosuchop.fused"});
  EXPECT_NE(e.find("unknown op"), std::string::npos) << e;
  e = attempt({"model.layers.*.mlp=moe.grouped_gemm"});  // a dense MLP is a swiglu module
  EXPECT_NE(e.find("cannot replace module model.layers.0.mlp"), std::string::npos) << e;
  e = attempt({"model.layers.0.**=rope.transposed"});  // matches attention, mlp, ... too
  EXPECT_NE(e.find("cannot replace"), std::string::npos) << e;
  for (int64_t l = 0; l < 4; ++l) EXPECT_STREQ(model.layer_kernels(l).rope->variant, "reference");
}

TEST(Replace, ConstraintRefusesAtStartUp) {
  const MoEKernel* slot[2] = {&kernel<MoEKernel>("reference"), &kernel<MoEKernel>("reference")};
  KernelShape s60, s128;
  s60.seq = 60, s128.seq = 128;
  std::vector<KernelModule> modules = {kernel_module("model.layers.0.mlp", slot[0], s60),
                                       kernel_module("model.layers.1.mlp", slot[1], s128)};
  const std::string e =
      error_of([&] { apply_kernel_replacements(modules, {"model.layers.*.mlp=moe.test_seq64"}); });
  EXPECT_NE(e.find("refuses module model.layers.0.mlp: sequence length 60 is not a multiple of 64"),
            std::string::npos)
      << e;
  EXPECT_STREQ(slot[1]->variant, "reference");  // nothing applied
  std::vector<std::string> log;
  apply_kernel_replacements(modules, {"model.layers.1.mlp=moe.test_seq64", "model.layers.0.mlp=moe.grouped_gemm"},
                            &log);
  EXPECT_STREQ(slot[1]->variant, "test_seq64");
  EXPECT_EQ(log[0], "[kernels] model.layers.0.mlp: moe.reference -> moe.grouped_gemm");
  EXPECT_EQ(log.size(), 3u);
}

}  // namespace
