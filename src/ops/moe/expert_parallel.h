// Expert parallelism for the MoE block (torchtitan's EP, dropless): the E experts are split over
// the ep ranks of a group, rank q holding experts [q E/ep, (q+1) E/ep) (gate_up [E/ep, 2I, H],
// down [E/ep, H, I]); the router is whole on every rank. Each rank routes ITS tokens as one process
// would (moe.h), then:
//
//   dispatch : the (token, k) slots sorted by expert (stable, so by owner, then expert, then token);
//              the per-expert counts exchanged (an all-to-all of E/ep counts per rank pair), then
//              the slots' x rows and routing weights sent to the experts' owners (all-to-all with
//              per-rank sizes). Any number of rows per expert, zero included: nothing is dropped.
//   experts  : the owner regroups what it received by local expert (source rank order within an
//              expert, each source's rows in its order) and runs the experts' FFN on the groups
//              (expert_ffn.h), exactly the single-process variant's per-row math;
//   combine  : the output rows go back to their tokens' ranks (the reverse all-to-all) and each
//              token sums its k rows times their weights (moe_combine, k order).
//
// Backward: dy of each slot is dispatched like x; the owner runs the experts' backward
// (expert_ffn_backward: dL/dw of each row, the input-gradient rows, the local experts' weight
// gradients) and sends dL/dw and the input-gradient rows back; the token's rank finishes the
// router gradient and dx as the single-process variant does. A local expert's weight gradient is
// thus the sum over every token of the ep group routed to it (the ranks holding the same experts
// sum theirs: the expert_fsdp group's reduce-scatter, distributed/fsdp.h).
//
// Every rank of the group must call forward and backward the same number of times, in the same
// order (they are collectives over `ep`).
#pragma once
#include "comm/comm.h"
#include "ops/moe/moe.h"

namespace titan {

// Both return the bytes this rank sent to the other ranks of the group (its own block excluded).
int64_t moe_ep_forward(const ExecContext& ctx, const MoEArgs& a, comm::Comm& ep, Tensor& y, MoESaved& saved);
int64_t moe_ep_backward(const ExecContext& ctx, const MoEArgs& a, comm::Comm& ep, const MoESaved& saved,
                        const Tensor& dy, const MoEGrads& g);

// Bytes this rank sends to other ranks of the group for one MoE block of T tokens (top-k K,
// hidden H) when its slots are spread evenly over the experts: (ep - 1) / ep of T K rows, in the
// forward's dispatch (x and the weight) and combine, and in the backward's dispatch (dy) and return
// (dx and dL/dw). For `titan info`; a run's actual bytes depend on the routing.
int64_t moe_ep_bytes_per_block(int64_t T, int64_t K, int64_t H, int64_t ep);

}  // namespace titan
