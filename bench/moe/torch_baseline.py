#!/usr/bin/env python3
"""PyTorch eager baseline for the MoE block: transformers' Qwen3MoeSparseMoeBlock, forward + backward
of sum(y * dy) on [1, tokens, hidden] f32, with the experts implementation given (eager: the loop
over the experts that receive tokens; grouped_mm: torch's grouped GEMM, transformers' default in a
full model when torch supports it). Prints one JSON line.
"""
import argparse
import json
import time

import torch
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=768)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--experts-impl", default="eager",
                    help="transformers experts implementation: eager (the loop over experts) or grouped_mm "
                         "(what a full model picks by default when torch supports it)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(hidden_size=args.hidden, moe_intermediate_size=args.inter, num_experts=args.experts,
                         num_experts_per_tok=args.top_k, norm_topk_prob=True, hidden_act="silu")
    cfg._experts_implementation = args.experts_impl
    block = Qwen3MoeSparseMoeBlock(cfg).float().train()
    with torch.no_grad():  # HF's initializer_range 0.02 for every weight, as in moe_bench
        block.gate.weight.normal_(0, 0.02)
        block.experts.gate_up_proj.normal_(0, 0.02)
        block.experts.down_proj.normal_(0, 0.02)
    x = torch.randn(1, args.tokens, args.hidden, requires_grad=True)
    dy = torch.randn(1, args.tokens, args.hidden)
    times = []
    for i in range(args.warmup + args.iters):
        block.zero_grad(set_to_none=False)
        x.grad = None
        t0 = time.perf_counter()
        y = block(x)
        y.backward(dy)
        t = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(t)
    print(json.dumps({"variant": "torch_" + args.experts_impl, "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "tokens": args.tokens, "best_s": round(min(times), 4),
                      "mean_s": round(sum(times) / len(times), 4)}))


if __name__ == "__main__":
    main()
