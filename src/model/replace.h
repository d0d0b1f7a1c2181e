// Kernel replacement by module name pattern (job file `[kernels] replace = [...]` or the command line):
//   "model.layers.*.self_attn.rope=rope.transposed"   every layer's RoPE -> the transposed-layout
//                                                     kernel ("rope.fused", its alias, too)
//   "model.layers.3.self_attn.attention=attention.cpu"   one layer only
//
// Pattern syntax, matched against the WHOLE module name (HF-style dotted names):
//   *   any run of characters that contains no '.'  (one dotted component, or part of one:
//       "model.layers.1*.mlp" matches layers 1 and 10-19, "model.layers.*.mlp" every layer)
//   **  any run of characters, dots included ("**.rope" matches every rope module)
//   [abc] one of the listed characters ("self_attn.[qkv]_proj")
//   anything else matches itself.
// Rules apply in order (a later rule overrides an earlier one on the same module). Errors, each one
// line, before anything is changed: a malformed entry, an unknown op or variant, a pattern that
// matches no module, a matched module of another op (rope.transposed on an mlp), and a variant whose
// declared constraint refuses the module's shape.
//
// The mechanism works on an abstract list of modules; decoder_kernel_modules() exposes the dense
// DecoderModel's per-layer kernel sets (see its comment for the names).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ops/kernel_shape.h"
#include "ops/registry.h"

namespace titan {

class DecoderModel;

struct KernelModule {
  std::string name;   // "model.layers.0.self_attn.rope"
  std::string op;     // "rope"
  KernelShape shape;  // what the constraint check sees
  std::function<std::string()> current;          // current variant
  std::function<void(const std::string&)> set;   // switch to a variant (already validated)
};

// A module slot over a kernel pointer of op type K (the pointer must outlive the module list).
template <class K>
KernelModule kernel_module(std::string name, const K*& slot, const KernelShape& shape) {
  const K** p = &slot;
  return KernelModule{std::move(name), K::op_name, shape, [p] { return std::string((*p)->variant); },
                      [p](const std::string& v) { *p = &kernel<K>(v); }};
}

struct ReplaceRule {
  std::string text, pattern, op, variant;
};
ReplaceRule parse_replace_rule(const std::string& entry);

bool module_pattern_match(const std::string& pattern, const std::string& name);

struct Replacement {
  std::string module, op, from, to;
};

// Validates every rule against the modules, then applies them. Returns one entry per replaced
// module (in module order, from = variant before, to = variant after); when `log` is given, appends
//   "[kernels] <module>: <op>.<from> -> <op>.<to>"  per module and then
//   "[kernels] <N> module(s) replaced by <R> rule(s)".
std::vector<Replacement> apply_kernel_replacements(std::vector<KernelModule>& modules,
                                                   const std::vector<std::string>& entries,
                                                   std::vector<std::string>* log = nullptr);

// The dense DecoderModel's replaceable modules (batch/seq: the job's, for constraint checks; 0 = unknown):
//   model.layers.N.self_attn.rope        rope
//   model.layers.N.self_attn.attention   attention
//   model.layers.N.mlp                   swiglu (the MLP activation; its projections use .linear),
//                                        or, on a sparse qwen3_moe layer, moe (the whole block)
//   model.layers.N.linear                linear (q/k/v/o and dense gate/up/down projections of layer N)
//   model.layers.N.norm                  rmsnorm (input_layernorm, post_attention_layernorm, q_norm,
//                                        k_norm of layer N: one kernel slot per layer)
//   model.layers.N.residual              residual
//   model.layers.N.self_attn.bias        bias (q/k/v projection biases; qwen2 only)
//   model.embed_tokens (embedding), model.norm (rmsnorm), lm_head (cross_entropy, fused with the head)
std::vector<KernelModule> decoder_kernel_modules(DecoderModel& model, int64_t batch = 0, int64_t seq = 0);

}  // namespace titan
