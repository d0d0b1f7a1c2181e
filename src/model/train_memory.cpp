#include "model/train_memory.h"

#include <algorithm>

#include "core/threading.h"
#include "model/flops.h"
#include "ops/cross_entropy/cpu_impl.h"

namespace titan {
namespace {

// The fused lm_head + cross-entropy kernel's row chunk (the same function the kernel uses).
int64_t ce_rows(int64_t n, int64_t v) { return ce_detail::chunk_rows(n, v); }

// Dense Qwen3.5 (full fine-tuning): the same parts as the attention families, per layer by its
// mixer (model/layers/gated_attention.cpp, gated_deltanet.cpp; the MLP and the head as above).
TrainMemory predict_qwen3_5(const ModelConfig& c, int64_t B, int64_t S, Checkpointing ckpt, DType compute) {
  const ModelSize ms = model_size(c, S);
  const int64_t T = B * S, H = c.hidden_size, Q = c.q_dim(), K = c.kv_dim(), I = c.intermediate_size;
  const int64_t V = c.vocab_size, L = c.num_hidden_layers, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t W2 = 2 * Q + 2 * K;  // gated attention's q_proj (query and gate), k_proj, v_proj rows
  const int64_t C = c.linear_conv_dim(), VD = c.linear_value_dim(), R = c.linear_in_rows();
  const int64_t Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads, dk = c.linear_key_head_dim;
  const int64_t KD = c.linear_key_dim(), dv = c.linear_value_head_dim;
  const bool bf16 = compute == DType::BF16;
  const int64_t bin = bf16 ? 2 : 4;
  const int64_t x = T * H * 4;
  TrainMemory m;
  // RoPE tables [positions, rotary_dim], cos and sin.
  const int64_t rope_pos = std::max(std::min<int64_t>(c.max_position_embeddings, 4096), S);
  m.rope = 2 * rope_pos * c.rotary_dim() * 4;
  m.weights = ms.params * 4 + m.rope;
  m.grads = ms.params * 4;
  m.optimizer = ms.params * 8;

  // Saved by the MLP block (dense_mlp.cpp): xn2, rstd2, gu, act.
  const int64_t s_mlp = T * H * bin + T * 4 + T * 2 * I * 4 + T * I * bin;
  const int64_t mlp_bwd = x + T * I * 4 + (bf16 ? T * 2 * I * 2 : 0);  // dxn2, dact (+ bf16 dgu)
  // Gated attention. Saved: xn1, rstd1, qkv [T, 2Q + 2K], q and k after norm + RoPE, their rstds,
  // attn, lse, gated = attn * sigmoid(gate), h. Backward at its largest (gated_attention_backward,
  // `gated` already released): dgate, dq, the raw query and its gradient [T, Q] each, dqkv, dxn1,
  // and under bf16 the GEMM's bf16 copy of dqkv.
  const int64_t s_ga = T * H * bin + T * 4 + T * W2 * 4 + T * (Q + K) * 4 + T * (nh + nkv) * 4 + T * Q * 4 +
                       B * nh * S * 4 + T * Q * 4 + x;
  const int64_t ga_bwd = 3 * T * Q * 4 + T * W2 * 4 + x + (bf16 ? T * W2 * 2 : 0);
  // Gated DeltaNet. Saved: xn1, rstd1, the fused in_proj output [T, R], the conv's input and output
  // [T, C], q, k, v (C columns), z, o, y [T, VD], g and beta [T, Hv], h. Backward (y released):
  // dz, dg, dbeta, d(conv out) [T, C], dqkv [T, R], then d(conv in) [T, C] or dxn1 [T, H] (+ bf16 dqkv).
  const int64_t s_gdn = T * H * bin + T * 4 + T * R * 4 + 3 * T * C * 4 + 3 * T * VD * 4 + 2 * T * Hv * 4 + x;
  const int64_t gdn_bwd = T * (C + R + 2 * Hv + std::max(C, H)) * 4 + (bf16 ? T * R * 2 : 0);
  // While the delta rule's backward runs: do, dz [T, VD], dq/dk/dv [T, C], dg, dbeta (y released),
  // and beside them the op's own heap (ops/gated_delta/cpu.cpp, outside the tensor allocator): the
  // normalised q, k and their inverse norms, dq^ and dk^ per value head [T, Hv, dk], and per
  // thread the states entering each chunk of a document (at most S tokens) and the dS / scratch.
  const int64_t delta_tensors = T * (VD + C + 2 * Hv) * 4;
  const int64_t chunk = 16;  // GatedDeltaOptions::chunk
  const int64_t threads = std::min<int64_t>(num_threads(), B * Hv);
  const int64_t delta_heap = T * (2 * KD + 2 * Hk + 2 * Hv * dk) * 4 +
                             threads * ((S + chunk - 1) / chunk + 2) * dk * dv * 4 +
                             threads * (2 * chunk * dv + chunk + 2 * dk * dv + chunk * chunk) * 4;

  int64_t kept = (L + 1) * x, layer_linear = 0, layer = 0, layer_tensors = 0;
  for (int64_t l = 0; l < L; ++l) {
    const bool gdn = c.layer_kind(l).mixer == MixerKind::GatedDeltaNet;
    const int64_t s_mix = gdn ? s_gdn : s_ga;
    layer_linear += (gdn ? R * H + H * VD : W2 * H + H * Q) + 3 * I * H;
    if (ckpt == Checkpointing::None) kept += s_mix + s_mlp;
    if (ckpt == Checkpointing::Selective) kept += s_mix;
    // One layer's backward on top of dx: what checkpointing recomputes, then the MLP's or the
    // mixer's working set (the delta rule's heap counted where it is held).
    const int64_t recompute = ckpt == Checkpointing::Full ? s_mix + s_mlp : ckpt == Checkpointing::Selective ? s_mlp : 0;
    const int64_t mix_t = gdn ? std::max(gdn_bwd, delta_tensors) : ga_bwd;
    const int64_t mix = gdn ? std::max(gdn_bwd, delta_tensors + delta_heap) : ga_bwd;
    layer_tensors = std::max(layer_tensors, x + recompute + std::max(mlp_bwd, mix_t));
    layer = std::max(layer, x + recompute + std::max(mlp_bwd, mix));
  }
  const int64_t wbf = bf16 ? layer_linear * 2 : 0;
  const int64_t rows = ce_rows(T, V);
  const int64_t head = 3 * x + T * 4 + rows * V * 4 + (bf16 ? rows * V * 2 + V * H * 2 + rows * H * 2 : 0);
  m.activations = kept + wbf + std::max(head, layer);
  m.heap = m.activations - (kept + wbf + std::max(head, layer_tensors));
  m.weight_copies = wbf;
  return m;
}

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
                       const StepLayout& lay, int64_t t_attn, int64_t t_mlp) {
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
             (sp ? Tr : T) * H * 4 + t_attn;
  z.s_mlp = T * H * bin + Tr * 4 + T * 2 * I * 4 + T * I * bin + t_mlp;
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
  TITAN_CHECK(!c.is_moe(), "memory prediction covers dense models only (not yet ", c.model_type, ")");
  TITAN_CHECK(!c.is_qwen3_5() || !lora, "memory prediction: LoRA on qwen3_5 is not modelled yet (predict without --lora-rank)");
  if (c.is_qwen3_5()) return predict_qwen3_5(c, B, S, ckpt, compute);
  TITAN_CHECK(base == DType::F32 || (base == DType::BF16 && lora && compute == DType::BF16),
              "memory prediction: a bf16 base is a frozen LoRA base computing in bf16");
  const ModelSize ms = model_size(c, S);
  const int64_t T = B * S, L = c.num_hidden_layers, V = c.vocab_size, H = c.hidden_size;
  const bool bf16 = compute == DType::BF16;
  TrainMemory m;
  int64_t lora_params = 0, t_attn = 0, t_mlp = 0;  // adapter parameters; x A^T bytes per layer, by block
  int64_t drop = 0;  // dropout: an adapter's backward holds dropout(x) and its gradient [T, in] f32
  if (lora) {
    for (const auto& a : lora_select(c, *lora)) {
      if (lora->dropout > 0) drop = std::max(drop, 2 * T * a.in * 4);
      lora_params += a.numel(lora->rank);
      if (a.is_parameter()) continue;  // merged into the weights: no x A^T kept
      (a.group == LoraGroup::Qkv || a.group == LoraGroup::O ? t_attn : t_mlp) += T * lora->rank * 4;
    }
    t_attn /= L, t_mlp /= L;  // every layer alike (patterns usually name all layers; an upper bound otherwise)
  }
  const DenseSizes z = dense_sizes(c, B, S, compute, base, StepLayout{}, t_attn, t_mlp);
  const int64_t trained = lora ? lora_params : ms.params;
  // Weights, plus the RoPE cos/sin tables [positions, head_dim] the model keeps (DecoderModel).
  const int64_t rope_pos = std::max(std::min<int64_t>(c.max_position_embeddings, 4096), S);
  // The layers' linear weights, and the untied lm_head: what a bf16 base keeps in bf16.
  const int64_t layer_linear = L * z.layer_linear;
  const int64_t bf16_base = base == DType::BF16 ? layer_linear + (c.tie_word_embeddings ? 0 : V * H) : 0;
  m.rope = 2 * rope_pos * c.head_dim * 4;
  m.weights = (ms.params - bf16_base + lora_params) * 4 + bf16_base * 2 + m.rope;
  m.grads = trained * 4;
  m.optimizer = trained * 8;

  int64_t kept = (L + 1) * z.x;  // store.x
  if (ckpt == Checkpointing::None) kept += L * (z.s_attn + z.s_mlp);
  if (ckpt == Checkpointing::Selective) kept += L * z.s_attn;
  // The bf16 copies of the layers' linear weights live through the step (none of a bf16 base).
  const int64_t wbf = bf16 && base != DType::BF16 ? layer_linear * 2 : 0;
  // One layer's backward on top of dx: its recomputed activations (checkpointing), then the MLP's
  // working set, or the attention's once the MLP's backward has freed its gate/up and act.
  const int64_t recompute = ckpt == Checkpointing::Full ? z.s_attn + z.s_mlp : ckpt == Checkpointing::Selective ? z.s_mlp : 0;
  const int64_t layer = z.x + recompute + std::max(z.mlp_bwd, z.attn_bwd - z.mlp_freed) + drop;
  m.activations = kept + wbf + std::max(z.head, layer);
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
  const DenseSizes z = dense_sizes(c, B, S, compute, DType::F32, lay, 0, 0);
  const int64_t L = c.num_hidden_layers;
  const int64_t keep = ckpt == Checkpointing::None ? z.s_attn + z.s_mlp : ckpt == Checkpointing::Selective ? z.s_attn : 0;
  const int64_t copy = compute == DType::BF16 ? z.layer_linear * 2 : 0;
  StepTimeline t;
  t.rope = 2 * std::max(std::min<int64_t>(c.max_position_embeddings, 4096), S) * c.head_dim * 4;
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
