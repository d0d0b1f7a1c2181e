// MoE block, grouped-GEMM variant (math in moe.h):
//   1. router logits x @ Wg^T (one GEMM), softmax + top-k per token (parallel over tokens);
//   2. permutation: the T*K (token, k) slots sorted by expert with a stable counting sort, so each
//      expert's tokens form one contiguous row group (in token order, hence deterministic);
//   3. the experts' SwiGLU FFN over the groups (expert_ffn.h: one GEMM per expert and projection);
//   4. un-permute: y[t] = sum_k w[t,k] * out[row(t,k)], summed in k order.
// Backward runs the same groups in reverse (expert_ffn_backward), then the router gradient and
// the sum over k of each token's expert input gradients.
//
// Every reduction has a fixed order (GEMMs per expert, per-token sums in k order), so results do
// not depend on the thread count as long as the GEMM's do not.
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/threading.h"
#include "ops/moe/expert_ffn.h"
#include "ops/moe/moe.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

// Row r of the padded layout holds slot row_slot[r] (or -1 for padding).
std::vector<int64_t> row_slots(const ExpertGroups& G, const int32_t* pos, int64_t TK) {
  std::vector<int64_t> rs(size_t(G.rows), -1);
  for (int64_t s = 0; s < TK; ++s) rs[size_t(pos[s])] = s;
  return rs;
}

// xp[r] = x[token of row r] (zero rows for padding).
void gather_rows(const float* src, int64_t H, const std::vector<int64_t>& rs, int64_t K, float* dst) {
  parallel_for(int64_t(rs.size()), 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (rs[size_t(r)] < 0)
        std::memset(dst + r * H, 0, size_t(H) * sizeof(float));
      else
        std::memcpy(dst + r * H, src + (rs[size_t(r)] / K) * H, size_t(H) * sizeof(float));
    }
  });
}

ExpertGroups groups_of(const Tensor& tokens_per_expert) {
  return ExpertGroups(tokens_per_expert.data<int64_t>(), tokens_per_expert.numel());
}

void forward(const ExecContext& ctx, const MoEArgs& a, Tensor& y, MoESaved& s) {
  opcheck::host_context(ctx, "moe.grouped_gemm");
  const auto [T, H, E, I, K] = moe_check_args(a, "grouped_gemm");
  opcheck::f32(y, "moe", "y");
  TITAN_CHECK(y.ndim() == 2 && y.dim(0) == T && y.dim(1) == H, "moe: y must be [", T, ", ", H, "], got ", y.str());
  TITAN_CHECK(T * K < (int64_t(1) << 31), "moe.grouped_gemm: T * top_k = ", T * K, " exceeds its int32 slot index");
  // 1. Router (f32) and routing.
  moe_route(ctx, a, T, H, E, K, s);
  // 2. Stable counting sort of the slots by expert.
  const int32_t* sel = s.topk_idx.data<int32_t>();
  const ExpertGroups G = groups_of(s.tokens_per_expert);
  s.slot_pos = Tensor::empty({T * K}, DType::I32);
  int32_t* pos = s.slot_pos.data<int32_t>();
  std::vector<int64_t> cursor = G.off;
  for (int64_t j = 0; j < T * K; ++j) pos[j] = int32_t(cursor[size_t(sel[j])]++);
  const std::vector<int64_t> rs = row_slots(G, pos, T * K);
  // 3. Expert FFNs over the groups.
  Tensor xp = Tensor::empty({G.rows, H}, DType::F32), out;
  gather_rows(a.x->data<float>(), H, rs, K, xp.data<float>());
  expert_ffn_forward(ctx, xp, G, *a.gate_up, *a.down, a.compute, s.acts, out);
  // 4. Un-permute with the routing weights.
  moe_combine(s.topk_w.data<float>(), pos, out.data<float>(), T, H, K, y.data<float>());
}

void backward(const ExecContext& ctx, const MoEArgs& a, const MoESaved& s, const Tensor& dy, const MoEGrads& gr) {
  opcheck::host_context(ctx, "moe.grouped_gemm");
  const auto [T, H, E, I, K] = moe_check_args(a, "grouped_gemm");
  opcheck::f32(dy, "moe", "dy");
  TITAN_CHECK(dy.ndim() == 2 && dy.dim(0) == T && dy.dim(1) == H, "moe: dy must be [", T, ", ", H, "], got ", dy.str());
  TITAN_CHECK(s.topk_idx.defined() && s.topk_idx.dim(0) == T && s.topk_idx.dim(1) == K && s.slot_pos.defined() &&
                  s.acts.defined() && s.acts.dim(1) == 2 * I,
              "moe.grouped_gemm: saved state does not come from this variant's forward with these arguments");
  moe_check_grads(a, s, gr);
  const ExpertGroups G = groups_of(s.tokens_per_expert);
  TITAN_CHECK(s.acts.dim(0) == G.rows, "moe.grouped_gemm: saved activations do not match the saved routing");
  const int32_t* pos = s.slot_pos.data<int32_t>();
  const float* w = s.topk_w.data<float>();
  const std::vector<int64_t> rs = row_slots(G, pos, T * K);
  // Each row's routing weight, dy of its token, and (for dgate_up) x of its token.
  std::vector<float> wr(size_t(G.rows), 0.f);
  for (int64_t r = 0; r < G.rows; ++r)
    if (rs[size_t(r)] >= 0) wr[size_t(r)] = w[rs[size_t(r)]];
  Tensor dyp = Tensor::empty({G.rows, H}, DType::F32), xp;
  gather_rows(dy.data<float>(), H, rs, K, dyp.data<float>());
  if (gr.dgate_up) {
    xp = Tensor::empty({G.rows, H}, DType::F32);
    gather_rows(a.x->data<float>(), H, rs, K, xp.data<float>());
  }
  std::vector<double> dwr;
  expert_ffn_backward(ctx, xp, G, *a.gate_up, *a.down, a.compute, s.acts, wr.data(), dyp, dwr, gr.dgate_up, gr.ddown);
  std::vector<double> dw(size_t(T * K));
  for (int64_t j = 0; j < T * K; ++j) dw[size_t(j)] = dwr[size_t(pos[j])];
  // dyp now holds each row's input gradient.
  moe_router_and_input_grads(ctx, a, s, dw.data(), dyp.data<float>(), pos, gr);
}

// Slot rows are stored as int32 (saved for backward): T * top_k must stay below 2^31.
std::string constraint(const KernelShape& s) {
  const int64_t slots = s.batch * s.seq * (s.top_k > 0 ? s.top_k : 1);
  if (slots >= (int64_t(1) << 31))
    return "batch * seq * top_k = " + std::to_string(slots) + " exceeds its int32 slot index (< 2^31)";
  return "";
}

const MoEKernel kGroupedGemm{"grouped_gemm", forward, backward, constraint};

}  // namespace
TITAN_REGISTER_KERNEL(MoEKernel, "grouped_gemm", DeviceType::CPU, kGroupedGemm);
}  // namespace titan
