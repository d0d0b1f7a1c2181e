// Expert-parallel MoE block: see expert_parallel.h.
#include "ops/moe/expert_parallel.h"

#include <cstring>
#include <vector>

#include "core/threading.h"
#include "ops/moe/expert_ffn.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

// Who sends what to whom, from the routing counts (tokens_per_expert [E] of this rank) and the
// counts the other ranks sent for this rank's experts (recv [ep, El]).
struct Dispatch {
  int64_t n, El;
  std::vector<int64_t> send_rows, recv_rows;  // per rank of the group
  std::vector<int64_t> local;                 // [El] rows each local expert received in all
  std::vector<int64_t> to_padded;             // received row i (rank-major order) -> row of the groups
  int64_t received = 0;

  Dispatch(const int64_t* tokens_per_expert, const int64_t* recv, int64_t ep, int64_t experts_local)
      : n(ep), El(experts_local), send_rows(size_t(ep), 0), recv_rows(size_t(ep), 0), local(size_t(El), 0) {
    for (int64_t q = 0; q < n; ++q)
      for (int64_t e = 0; e < El; ++e) {
        send_rows[size_t(q)] += tokens_per_expert[q * El + e];
        recv_rows[size_t(q)] += recv[q * El + e];
        local[size_t(e)] += recv[q * El + e];
      }
    for (int64_t q = 0; q < n; ++q) received += recv_rows[size_t(q)];
  }
  // The received rows' places in the padded layout: expert e's group holds rank 0's rows for it,
  // then rank 1's, ...
  void place(const ExpertGroups& G, const int64_t* recv) {
    to_padded.resize(size_t(received));
    std::vector<int64_t> cursor = G.off;
    int64_t i = 0;
    for (int64_t q = 0; q < n; ++q)
      for (int64_t e = 0; e < El; ++e)
        for (int64_t c = 0; c < recv[q * El + e]; ++c) to_padded[size_t(i++)] = cursor[size_t(e)]++;
  }
  // Rows of `rows` that go to (or come from) another rank than `self`.
  static int64_t remote_rows(const std::vector<int64_t>& rows, int self) {
    int64_t n = 0;
    for (size_t q = 0; q < rows.size(); ++q) n += int(q) == self ? 0 : rows[q];
    return n;
  }
  std::vector<int64_t> scaled(const std::vector<int64_t>& rows, int64_t per_row) const {
    std::vector<int64_t> v(rows);
    for (auto& x : v) x *= per_row;
    return v;
  }
};

// dst[pos[j]] = src[j / K] for the T K slots (rows of H floats).
void rows_to_slots(const float* src, const int32_t* pos, int64_t TK, int64_t K, int64_t H, float* dst) {
  parallel_for(TK, 64, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) std::memcpy(dst + int64_t(pos[j]) * H, src + (j / K) * H, size_t(H) * sizeof(float));
  });
}

// Row i of `from` to row map[i] of `to` (forward = true), or the reverse.
template <class T>
void remap_rows(const T* from, const std::vector<int64_t>& map, int64_t width, T* to, bool forward) {
  parallel_for(int64_t(map.size()), 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t a = forward ? i : map[size_t(i)], b = forward ? map[size_t(i)] : i;
      std::memcpy(to + b * width, from + a * width, size_t(width) * sizeof(T));
    }
  });
}

}  // namespace

int64_t moe_ep_forward(const ExecContext& ctx, const MoEArgs& a, comm::Comm& ep, Tensor& y, MoESaved& s) {
  const int64_t n = ep.size();
  const auto [T, H, E, I, K] = moe_check_args(a, "expert_parallel", n);
  const int64_t El = E / n;
  opcheck::f32(y, "moe", "y");
  TITAN_CHECK(y.ndim() == 2 && y.dim(0) == T && y.dim(1) == H, "moe: y must be [", T, ", ", H, "], got ", y.str());
  TITAN_CHECK(T * K < (int64_t(1) << 31), "moe.expert_parallel: T * top_k = ", T * K, " exceeds its int32 slot index");
  moe_route(ctx, a, T, H, E, K, s);
  // The slots sorted by expert (so by owner): slot j goes to row pos[j] of the send buffer.
  const int64_t* cnt = s.tokens_per_expert.data<int64_t>();
  std::vector<int64_t> cursor(size_t(E), 0);
  for (int64_t e = 1; e < E; ++e) cursor[size_t(e)] = cursor[size_t(e - 1)] + cnt[e - 1];
  s.slot_pos = Tensor::empty({T * K}, DType::I32);
  int32_t* pos = s.slot_pos.data<int32_t>();
  const int32_t* sel = s.topk_idx.data<int32_t>();
  for (int64_t j = 0; j < T * K; ++j) pos[j] = int32_t(cursor[size_t(sel[j])]++);
  // Counts: rank q gets my counts of its El experts.
  s.ep_counts = Tensor::empty({n, El}, DType::I64);
  ep.all_to_all_bytes(cnt, s.ep_counts.data<int64_t>(), size_t(El) * sizeof(int64_t));
  const int64_t* recv = s.ep_counts.data<int64_t>();
  Dispatch d(cnt, recv, n, El);
  const ExpertGroups G(d.local.data(), El);
  d.place(G, recv);
  // Dispatch x rows and weights.
  Tensor xs = Tensor::empty({T * K, H}, DType::F32), xr = Tensor::empty({d.received, H}, DType::F32);
  rows_to_slots(a.x->data<float>(), pos, T * K, K, H, xs.data<float>());
  comm::all_to_all_v(ep, xs.data<float>(), d.scaled(d.send_rows, H).data(), xr.data<float>(),
                     d.scaled(d.recv_rows, H).data());
  xs = Tensor();
  std::vector<float> ws(size_t(T * K)), wr(size_t(d.received));
  const float* w = s.topk_w.data<float>();
  for (int64_t j = 0; j < T * K; ++j) ws[size_t(pos[j])] = w[j];
  comm::all_to_all_v(ep, ws.data(), d.send_rows.data(), wr.data(), d.recv_rows.data());
  s.ep_rows = Tensor::zeros({G.rows, H}, DType::F32);
  remap_rows(xr.data<float>(), d.to_padded, H, s.ep_rows.data<float>(), true);
  s.ep_w = Tensor::zeros({G.rows}, DType::F32);
  remap_rows(wr.data(), d.to_padded, 1, s.ep_w.data<float>(), true);
  // The local experts.
  Tensor out;
  expert_ffn_forward(ctx, s.ep_rows, G, *a.gate_up, *a.down, a.compute, s.acts, out);
  // Combine: the rows back to their tokens' ranks (in the order they came), then the weighted sum.
  remap_rows(out.data<float>(), d.to_padded, H, xr.data<float>(), false);
  out = Tensor();
  Tensor os = Tensor::empty({T * K, H}, DType::F32);
  comm::all_to_all_v(ep, xr.data<float>(), d.scaled(d.recv_rows, H).data(), os.data<float>(),
                     d.scaled(d.send_rows, H).data());
  moe_combine(w, pos, os.data<float>(), T, H, K, y.data<float>());
  // Sent: x rows and weights out, the output rows of the others' tokens back.
  return d.remote_rows(d.send_rows, ep.rank()) * int64_t(sizeof(float)) * (H + 1) +
         d.remote_rows(d.recv_rows, ep.rank()) * int64_t(sizeof(float)) * H;
}

int64_t moe_ep_backward(const ExecContext& ctx, const MoEArgs& a, comm::Comm& ep, const MoESaved& s, const Tensor& dy,
                        const MoEGrads& g) {
  const int64_t n = ep.size();
  const auto [T, H, E, I, K] = moe_check_args(a, "expert_parallel", n);
  const int64_t El = E / n;
  opcheck::f32(dy, "moe", "dy");
  TITAN_CHECK(dy.ndim() == 2 && dy.dim(0) == T && dy.dim(1) == H, "moe: dy must be [", T, ", ", H, "], got ", dy.str());
  TITAN_CHECK(s.topk_idx.defined() && s.topk_idx.dim(0) == T && s.topk_idx.dim(1) == K && s.slot_pos.defined() &&
                  s.ep_counts.defined() && s.ep_counts.dim(0) == n && s.ep_counts.dim(1) == El && s.acts.defined() &&
                  s.acts.dim(1) == 2 * I,
              "moe.expert_parallel: saved state does not come from its forward with these arguments");
  moe_check_grads(a, s, g);
  const int64_t* recv = s.ep_counts.data<int64_t>();
  Dispatch d(s.tokens_per_expert.data<int64_t>(), recv, n, El);
  const ExpertGroups G(d.local.data(), El);
  d.place(G, recv);
  TITAN_CHECK(s.acts.dim(0) == G.rows && s.ep_rows.dim(0) == G.rows,
              "moe.expert_parallel: saved activations do not match the saved routing");
  const int32_t* pos = s.slot_pos.data<int32_t>();
  // Dispatch dy like x.
  Tensor dys = Tensor::empty({T * K, H}, DType::F32), dyr = Tensor::empty({d.received, H}, DType::F32);
  rows_to_slots(dy.data<float>(), pos, T * K, K, H, dys.data<float>());
  comm::all_to_all_v(ep, dys.data<float>(), d.scaled(d.send_rows, H).data(), dyr.data<float>(),
                     d.scaled(d.recv_rows, H).data());
  Tensor dyp = Tensor::zeros({G.rows, H}, DType::F32);
  remap_rows(dyr.data<float>(), d.to_padded, H, dyp.data<float>(), true);
  // The local experts' backward: dyp becomes the rows' input gradients.
  std::vector<double> dwp;
  expert_ffn_backward(ctx, s.ep_rows, G, *a.gate_up, *a.down, a.compute, s.acts, s.ep_w.data<float>(), dyp, dwp,
                      g.dgate_up, g.ddown);
  // Back to the tokens' ranks: input-gradient rows and dL/dw.
  remap_rows(dyp.data<float>(), d.to_padded, H, dyr.data<float>(), false);
  dyp = Tensor();
  comm::all_to_all_v(ep, dyr.data<float>(), d.scaled(d.recv_rows, H).data(), dys.data<float>(),
                     d.scaled(d.send_rows, H).data());
  std::vector<double> dwr(size_t(d.received)), dws(size_t(T * K));
  remap_rows(dwp.data(), d.to_padded, 1, dwr.data(), false);
  comm::all_to_all_v(ep, dwr.data(), d.recv_rows.data(), dws.data(), d.send_rows.data());
  std::vector<double> dw(size_t(T * K));
  for (int64_t j = 0; j < T * K; ++j) dw[size_t(j)] = dws[size_t(pos[j])];
  moe_router_and_input_grads(ctx, a, s, dw.data(), dys.data<float>(), pos, g);
  // Sent: dy rows out, the input-gradient rows and dL/dw of the others' tokens back.
  return d.remote_rows(d.send_rows, ep.rank()) * int64_t(sizeof(float)) * H +
         d.remote_rows(d.recv_rows, ep.rank()) * (int64_t(sizeof(float)) * H + int64_t(sizeof(double)));
}

int64_t moe_ep_bytes_per_block(int64_t T, int64_t K, int64_t H, int64_t ep) {
  if (ep <= 1) return 0;
  const int64_t rows = T * K * (ep - 1) / ep;
  // forward: x + w out, output rows back; backward: dy out, dx + dL/dw (double) back
  return rows * (int64_t(sizeof(float)) * (H + 1) + int64_t(sizeof(float)) * H + int64_t(sizeof(float)) * H +
                 int64_t(sizeof(float)) * H + int64_t(sizeof(double)));
}

}  // namespace titan
