#include "model/train_memory.h"

#include <algorithm>

#include "model/flops.h"
#include "model/train_memory_parts.h"
#include "ops/cross_entropy/cpu_impl.h"

namespace titan {
namespace {

// The fused lm_head + cross-entropy kernel's row chunk (the same function the kernel uses).
int64_t ce_rows(int64_t n, int64_t v) { return ce_detail::chunk_rows(n, v); }

// The tensors one rank's step of a dense attention model allocates, in bytes (model/layers/
// attention.cpp, dense_mlp.cpp, decoder_layer.cpp, decoder.cpp's head; under a layout also
// layers/tensor_parallel_ops.cpp and context_parallel_ops.cpp). T: the rank's tokens (B x S/cp),
// Tr: its residual-stream rows (T/tp with sequence parallelism).
struct DenseSizes {
  int64_t x = 0;                  // a residual-stream tensor [Tr, H] f32: store.x, dx, a layer's output
  int64_t s_attn = 0, s_mlp = 0;  // what the attention / MLP block saves for the backward (LayerActs)
  int64_t head = 0;               // the head's working set, dx included
  int64_t mlp_bwd = 0, attn_bwd = 0;  // a block's backward working set beside dx and the saved tensors
  int64_t mlp_freed = 0;          // the MLP's saved gate/up and act, freed by its backward before the attention's
  // A layer's forward at its largest: the attention block's saved tensors but its output with the K/V
  // gathers or o_proj's partial sums (attn_fwd), or the whole layer's with down_proj's (mlp_fwd).
  int64_t attn_fwd = 0, mlp_fwd = 0;
  int64_t embed_fwd = 0, embed_bwd = 0;
  int64_t layer_linear = 0;       // elements of one layer's linear weights on this rank
};

DenseSizes dense_sizes(const ModelConfig& c, int64_t B, int64_t S_global, DType compute, DType base,
                       const StepLayout& lay) {
  const int64_t tp = lay.tp, cp = lay.cp;
  const bool tpon = tp > 1, sp = tpon && lay.sequence_parallel;
  const int64_t S = S_global / cp, T = B * S, Tr = sp ? T / tp : T, H = c.hidden_size, D = c.head_dim;
  const int64_t nh = c.num_attention_heads / tp, nkv = c.num_key_value_heads / tp, Q = nh * D, K = nkv * D,
                W = Q + 2 * K, I = c.intermediate_size / tp, V = c.vocab_size / tp;
  const bool bf16 = compute == DType::BF16;
  const int64_t bin = bf16 ? 2 : 4;  // bytes of an input only a GEMM reads
  const int64_t TH = T * H * 4, gathered = sp ? TH : 0;  // an all-gathered [T, H] beside the local rows
  DenseSizes z;
  z.x = Tr * H * 4;
  z.layer_linear = W * H + H * Q + 2 * I * H + H * I;
  // Saved: xn1 (gathered to T rows), rstd1, qkv, the q/k norms' rstds, q and k after RoPE, attn, lse,
  // h (the block's output: Tr rows under sequence parallelism, else T); xn2, rstd2, gate/up, act.
  z.s_attn = T * H * bin + Tr * 4 + T * W * 4 + T * (nh + nkv) * 4 + T * (Q + K) * 4 + T * Q * 4 + B * nh * S * 4 +
             (sp ? Tr : T) * H * 4;
  z.s_mlp = T * H * bin + Tr * 4 + T * 2 * I * 4 + T * I * bin;
  // Context parallelism (model/layers/context_parallel_ops.cpp), per attention call, beside the
  // layer's own tensors; KB: one rank's K (or V) [T, kv, D] f32, G = cp KB: a whole sequence's.
  const int64_t KB = T * K * 4, G = cp * KB;
  // forward: K gathered, then V: its packed rows, the all-gather's [cp, T, kv, D] and the sequences
  const int64_t cp_fwd = cp > 1 ? 3 * G + KB : 0;
  // The attention kernel's backward keeps a dQ per key range [ranges, B, Sq, heads, D] when it
  // splits the keys (ops/attention/cpu.cpp: at least 16 tasks of (row, KV head) pairs).
  auto dq_parts = [&](int64_t rows, int64_t sq, int64_t sk) {
    const int64_t pairs = rows * nkv, nb = (sk + 63) / 64, nr = std::min(nb, (16 + pairs - 1) / pairs);
    return nr > 1 ? nr * rows * sq * Q * 4 : 0;
  };
  // backward: K and V gathered again, the whole-sequence dK and dV, one chunk's dK/dV parts (its
  // keys: up to the whole sequence for the rank holding its end) and the kernel's dQ parts, then
  // for each reduce-scatter a rank-major copy and this rank's result.
  const int64_t chunk = lay.head_tail ? S / 2 : S;  // the queries of one backward call: a chunk of the rank's
  const int64_t cp_bwd = cp > 1 ? std::max({3 * G + KB, 4 * G + 2 * S_global * K * 4 + dq_parts(1, chunk, S_global),
                                            5 * G + KB})
                                : dq_parts(B, S, S);
  const int64_t rows = tpon ? ce_detail::chunk_rows(T, V, size_t(64) << 20) : ce_rows(T, V);
  // Head: dx, the normed rows and their rstd, dxf [T, H] (the gathered normed rows beside them under
  // sequence parallelism), the logits chunk (and its bf16 dlogits and bf16 lm_head with bf16 GEMMs,
  // the lm_head's copy unless a bf16 base stores it so).
  const bool head_stored_bf16 = base == DType::BF16 && !c.tie_word_embeddings;
  const int64_t head_bf16 = bf16 ? rows * V * 2 + (head_stored_bf16 ? 0 : V * H * 2) + rows * H * 2 : 0;
  z.head = tpon ? 2 * z.x + Tr * 4 + TH + gathered + rows * V * 4 + head_bf16 : 3 * TH + T * 4 + rows * V * 4 + head_bf16;
  // MLP backward: dxn2, dy (gathered), dact, and with bf16 GEMMs down_proj's bf16 copy of dy, or
  // later (act freed) the bf16 dgu. Attention backward: dh (gathered); dattn with o_proj's bf16
  // copy of dh, then with dqkv and the kernel's (or context parallelism's) buffers; later dqkv,
  // dxn1 (and its reduced rows) and the qkv GEMM's bf16 copy of dqkv.
  z.mlp_bwd = TH + gathered + T * I * 4 + (bf16 ? std::max(T * H * 2, T * 2 * I * 2 - T * I * 2) : 0);
  z.attn_bwd = gathered + std::max({T * Q * 4 + (bf16 ? T * H * 2 : 0), T * W * 4 + T * Q * 4 + cp_bwd,
                                    T * W * 4 + TH + (sp ? z.x : 0) + (bf16 ? T * W * 2 : 0)});
  z.mlp_freed = T * 2 * I * 4 + T * I * bin;
  // Forward transients: the K/V gathers (before the block's output h exists), a row-parallel
  // block's [T, H] partial sums before the reduction (and h, the reduced rows, beside them).
  const int64_t h = (sp ? Tr : T) * H * 4;
  z.attn_fwd = z.s_attn - h + std::max(cp_fwd, tpon ? TH + h : h);
  z.mlp_fwd = z.s_attn + z.s_mlp + (tpon ? TH : 0);
  // The embedding's [T, H] rows before the reduction (tp), or the gathered dx of its backward.
  z.embed_fwd = TH + (sp ? z.x : 0);
  z.embed_bwd = z.x + gathered;
  return z;
}

}  // namespace

TrainMemory predict_train_memory(const ModelConfig& c, int64_t B, int64_t S, Checkpointing ckpt, DType compute,
                                 const LoraConfig* lora, DType base) {
  using namespace train_memory_detail;
  TITAN_CHECK(base == DType::F32 || (base == DType::BF16 && lora && compute == DType::BF16),
              "memory prediction: a bf16 base is a frozen LoRA base computing in bf16");
  if (c.is_qwen3_5()) return predict_qwen3_5(c, B, S, ckpt, compute, lora, base);
  const ModelSize ms = model_size(c, S);
  const int64_t T = B * S, L = c.num_hidden_layers, V = c.vocab_size, H = c.hidden_size;
  const bool bf16 = compute == DType::BF16;
  TrainMemory m;
  const LoraSizes ls = lora_sizes(c, T, lora);
  const DenseSizes z = dense_sizes(c, B, S, compute, base, StepLayout{});
  // A dense layer's MLP block (z), or a sparse layer's (Qwen3-MoE: mlp_only_layers and
  // decoder_sparse_step mix the two).
  MlpSizes dense;
  dense.saved = z.s_mlp, dense.bwd = z.mlp_bwd, dense.freed = z.mlp_freed;
  dense.copies = 3 * c.intermediate_size * H;
  const MlpSizes sparse = c.is_moe() ? moe_mlp_sizes(c, T, compute, !lora, base) : MlpSizes{};
  const int64_t attn_linear = z.layer_linear - dense.copies;  // q/k/v and o
  const int64_t trained = lora ? ls.params : ms.params;
  int64_t kept = (L + 1) * z.x;  // store.x
  int64_t layer_linear = 0, layer = 0;
  for (int64_t l = 0; l < L; ++l) {
    const MlpSizes& mlp = c.layer_is_sparse(l) ? sparse : dense;
    // The adapters' x A^T: a recomputation replaces them, Selective does not drop them.
    const int64_t t = ls.t_mix[size_t(l)] + ls.t_mlp[size_t(l)];
    layer_linear += attn_linear + mlp.copies;
    if (ckpt == Checkpointing::None) kept += z.s_attn + mlp.saved + t;
    if (ckpt == Checkpointing::Selective) kept += z.s_attn + t;
    // One layer's backward on top of dx: its recomputed activations (checkpointing), then the MLP's
    // working set, or the attention's once the MLP's backward has freed its part, and with LoRA
    // dropout an adapter's dropped input and its gradient.
    const int64_t recompute = ckpt == Checkpointing::Full        ? z.s_attn + mlp.saved + t
                              : ckpt == Checkpointing::Selective ? mlp.saved
                                                                 : 0;
    layer = std::max(layer, z.x + recompute + std::max(mlp.bwd, z.attn_bwd - mlp.freed) + ls.drop);
  }
  // Weights, plus the RoPE cos/sin tables [positions, head_dim] the model keeps (DecoderModel).
  // The layers' linear weights, and the untied lm_head: what a bf16 base keeps in bf16.
  const int64_t bf16_base = base == DType::BF16 ? layer_linear + (c.tie_word_embeddings ? 0 : V * H) : 0;
  m.rope = rope_bytes(c, S, c.head_dim);
  m.weights = (ms.params - bf16_base + ls.params) * 4 + bf16_base * 2 + m.rope;
  m.grads = trained * 4;
  m.optimizer = trained * 8;
  // The bf16 copies of the layers' linear weights live through the step (none of a bf16 base).
  const int64_t wbf = bf16 && base != DType::BF16 ? layer_linear * 2 : 0;
  // The aux loss's logit gradients live from before the head until each sparse layer's backward.
  m.activations = kept + wbf + aux_loss_bytes(c, T) + std::max(z.head, layer);
  m.weight_copies = wbf;
  return m;
}

StepTimeline train_step_timeline(const ModelConfig& c, int64_t B, int64_t S, Checkpointing ckpt, DType compute,
                                 const StepLayout& lay) {
  TITAN_CHECK(!c.is_moe() && !c.is_qwen3_5(), "memory prediction under tensor / context parallelism covers dense ",
              "attention models only (not yet ", c.model_type, ")");
  TITAN_CHECK(lay.tp >= 1 && lay.cp >= 1, "memory prediction: degrees must be positive");
  const auto divides = [&](const char* what, int64_t n, int64_t by, const char* key) {
    TITAN_CHECK(n % by == 0, "memory prediction: ", what, " = ", n, " does not divide by ", key, " = ", by);
  };
  divides("num_key_value_heads", c.num_key_value_heads, lay.tp, "tp");
  divides("intermediate_size", c.intermediate_size, lay.tp, "tp");
  divides("vocab_size", c.vocab_size, lay.tp, "tp");
  if (lay.cp > 1) divides("seq_len", S, lay.head_tail ? 2 * lay.cp : lay.cp, lay.head_tail ? "2 cp (head-tail chunks)" : "cp");
  if (lay.tp > 1 && lay.sequence_parallel) divides("local batch x seq_len / cp", B * S / lay.cp, lay.tp, "tp");
  const DenseSizes z = dense_sizes(c, B, S, compute, DType::F32, lay);
  const int64_t L = c.num_hidden_layers;
  const int64_t keep = ckpt == Checkpointing::None ? z.s_attn + z.s_mlp : ckpt == Checkpointing::Selective ? z.s_attn : 0;
  const int64_t copy = compute == DType::BF16 ? z.layer_linear * 2 : 0;
  StepTimeline t;
  t.rope = train_memory_detail::rope_bytes(c, S, c.head_dim);
  for (const UnitStep& s : unit_schedule(c, Pass::Train, ckpt)) {
    if (s.kind != UnitStep::Kind::Run) continue;
    const int64_t l = s.unit - 1;  // the layer, when 0 <= l < L
    int64_t a = 0;
    if (s.unit == 0) {
      a = s.phase == Phase::Forward ? z.embed_fwd : z.embed_bwd;
    } else if (l == L) {  // the head: every layer's input and output, what each layer kept
      a = (L + 1) * z.x + L * keep + z.head;
    } else if (s.phase == Phase::Forward) {  // inputs of layers 0..l, its output, what layers < l kept, layer l
      a = (l + 2) * z.x + l * keep + std::max(z.attn_fwd, z.mlp_fwd);
    } else if (s.phase == Phase::Recompute) {  // (store.x[l + 1] freed) inputs 0..l, dx, layers < l, layer l
      // refilled: selective recomputes the MLP only; neither runs down_proj (no layer output).
      a = (l + 2) * z.x + l * keep + (ckpt == Checkpointing::Full ? std::max(z.attn_fwd, z.s_attn + z.s_mlp)
                                                                   : z.s_attn + z.s_mlp);
    } else {  // backward: the same and the layer's working set
      a = (l + 2) * z.x + l * keep + z.s_attn + z.s_mlp + std::max(z.mlp_bwd, z.attn_bwd - z.mlp_freed);
    }
    t.runs.push_back(s);
    t.activations.push_back(a);
    t.weight_copies.push_back(l >= 0 && l < L ? copy : 0);
  }
  return t;
}

}  // namespace titan
