#!/usr/bin/env python3
"""PyTorch eager baseline: full training steps (forward + backward + AdamW) of transformers'
Qwen3ForCausalLM with the benchmark shapes. Prints one JSON line with tokens/s.

Best settings are the caller's job (bench/train_step/run.sh): OPENBLAS_CORETYPE unset, jemalloc
preloaded, torch threads = the thread count given here.
"""
import argparse
import json
import statistics
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="autocast matmuls to bf16 (f32 master weights)")
    ap.add_argument("--moe-experts", type=int, default=0, help="> 0: Qwen3MoeForCausalLM with this many experts")
    ap.add_argument("--moe-topk", type=int, default=4)
    ap.add_argument("--moe-ffn", type=int, default=768)
    ap.add_argument("--untied", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    common = dict(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                  num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                  head_dim=args.head_dim, tie_word_embeddings=not args.untied, max_position_embeddings=4096,
                  use_cache=False)
    if args.moe_experts > 0:
        cfg = Qwen3MoeConfig(num_experts=args.moe_experts, num_experts_per_tok=args.moe_topk,
                             moe_intermediate_size=args.moe_ffn, norm_topk_prob=True, **common)
        cfg._attn_implementation = "sdpa"
        model = Qwen3MoeForCausalLM(cfg).float().train()
    else:
        cfg = Qwen3Config(**common)
        cfg._attn_implementation = "sdpa"
        model = Qwen3ForCausalLM(cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
    g = torch.Generator().manual_seed(1)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)
        x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, args.vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if step >= args.warmup:
            times.append(dt)
    tokens = args.batch * args.seq
    med = statistics.median(times)
    import resource
    print(json.dumps({"impl": "pytorch", "tokens_per_s": tokens / med, "step_s": med, "loss_first": losses[0],
                      "loss_last": losses[-1], "threads": args.threads, "bf16": args.bf16,
                      "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
