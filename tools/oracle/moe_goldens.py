#!/usr/bin/env python3
"""Golden fixtures for the MoE block, from Hugging Face transformers' Qwen3MoeSparseMoeBlock.

For each tiny configuration this writes tests/fixtures/moe/<name>.safetensors (f32 unless noted):
  x [T, H], router [E, H] (mlp.gate.weight), gate_up [E, 2I, H], down [E, H, I]  the inputs
  dy [T, H]                    the upstream gradient: the loss is sum(y * dy)
  y [T, H], logits [T, E]      the block output and transformers' router_logits
  topk_idx [T, K] i64          the selected experts, in rank order
  dx, drouter, dgate_up, ddown the gradients of sum(y * dy)
  logits2 [T2, E]              a second layer's router logits, and for load_balancing_loss_func
  aux [1], daux_logits, daux_logits2   over (logits, logits2): the loss and its gradients
and metadata: top_k, norm_topk_prob, native_topk_agrees ("1" when torch.topk picks the same experts).

Ties: torch.topk on CPU returns an implementation-defined member of a tie (topk([.1,.3,.3,.3], 2)
gives [2, 3]). titan pins the rule "ties go to the lower expert index", so this script runs the block
with torch.topk replaced by a stable descending sort (identical to torch.topk whenever there is no
tie) and records whether the native choice agreed. The `tie` case has exact ties at the top-k
boundary: zero input rows (all experts equal) and two identical router rows.

Run: python tools/oracle/moe_goldens.py [--out tests/fixtures/moe]
Needs: pip install torch transformers safetensors (never needed to build or test titan).
"""
import argparse
import os
import zlib

import torch
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe import modeling_qwen3_moe as m

# name, T, H, E, I, K, norm_topk_prob, tie
CASES = [
    ("basic", 11, 16, 8, 12, 2, True, False),
    ("nonorm_k3", 9, 12, 6, 10, 3, False, False),
    ("tie", 8, 8, 4, 6, 2, True, True),
    ("one_expert_k1", 5, 8, 4, 4, 1, True, False),
]

_native_topk = torch.topk


def stable_topk(input, k, dim=-1, largest=True, sorted=True):
    assert largest and sorted
    values, indices = torch.sort(input, dim=dim, descending=True, stable=True)
    return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))


def make(name, T, H, E, I, K, norm, tie, out):
    torch.manual_seed(zlib.crc32(name.encode()) % 1000)
    cfg = Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=K,
                         norm_topk_prob=norm, hidden_act="silu")
    block = m.Qwen3MoeSparseMoeBlock(cfg).float()
    with torch.no_grad():
        block.gate.weight.normal_(0, 0.5)
        block.experts.gate_up_proj.normal_(0, 0.3)
        block.experts.down_proj.normal_(0, 0.3)
        if tie:
            block.gate.weight[3].copy_(block.gate.weight[2])
    x = torch.randn(T, H)
    if tie:
        x[0].zero_()
        x[5].zero_()
    x.requires_grad_(True)
    dy = torch.randn(T, H)
    torch.topk = stable_topk
    try:
        logits, _, idx = block.gate(x)
        y = block(x.view(1, T, H)).view(T, H)
        (y * dy).sum().backward()
        logits2 = torch.randn(T + 3, E, requires_grad=True)
        l1 = logits.detach().clone().requires_grad_(True)
        aux = m.load_balancing_loss_func((l1, logits2), E, K)
        aux.backward()
    finally:
        torch.topk = _native_topk
    native = _native_topk(torch.softmax(logits.detach(), -1), K, dim=-1).indices
    agrees = bool((native == idx).all())
    tensors = {
        "x": x.detach(), "router": block.gate.weight.detach(), "gate_up": block.experts.gate_up_proj.detach(),
        "down": block.experts.down_proj.detach(), "dy": dy, "y": y.detach(), "logits": logits.detach(),
        "topk_idx": idx.to(torch.int64), "dx": x.grad, "drouter": block.gate.weight.grad,
        "dgate_up": block.experts.gate_up_proj.grad, "ddown": block.experts.down_proj.grad,
        "logits2": logits2.detach(), "aux": aux.detach().reshape(1), "daux_logits": l1.grad,
        "daux_logits2": logits2.grad,
    }
    meta = {"top_k": str(K), "norm_topk_prob": "1" if norm else "0", "native_topk_agrees": "1" if agrees else "0"}
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, name + ".safetensors"), metadata=meta)
    print(f"{name}: T={T} H={H} E={E} I={I} K={K} norm={norm} native_topk_agrees={agrees} aux={aux.item():.6f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/fixtures/moe"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for c in CASES:
        make(*c, args.out)


if __name__ == "__main__":
    main()
