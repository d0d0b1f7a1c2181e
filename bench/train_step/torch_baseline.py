#!/usr/bin/env python3
"""PyTorch eager baseline: full training steps (forward + backward + gradient clipping + AdamW) of
a transformers model with random init, f32 master weights: Qwen3ForCausalLM (or Qwen3-MoE) from the
shape flags, or, with --config CONFIG_JSON, whatever causal LM that config.json names
(bench/qwen3_5: Qwen3_5ForCausalLM, whose Gated DeltaNet runs transformers' torch fallbacks when
the FLA / causal-conv1d kernel packages are absent; the JSON line records which were importable).
Prints one JSON line with the median step time and tokens/s after warm-up.

--device cuda runs it on the GPU (CUDA events are not needed: the step ends with a synchronize);
--compile wraps the model in torch.compile (the first steps, warm-up, include the compilation).

Best settings are the caller's job (bench/train_step/run.sh): OPENBLAS_CORETYPE unset, jemalloc
preloaded, torch threads = the thread count given here.
"""
import argparse
import importlib.util
import json
import os
import resource
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
    ap.add_argument("--config", help="a config.json: build that model instead of the shape flags' Qwen3")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = from_config(args.config) if args.config else from_flags(args)
    model = model.to(args.device)
    vocab = model.config.vocab_size
    step_model = torch.compile(model) if args.compile else model
    cuda = args.device.startswith("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
    g = torch.Generator().manual_seed(1)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, vocab, (args.batch, args.seq + 1), generator=g)
        x, y = ids[:, :-1].contiguous().to(args.device), ids[:, 1:].contiguous().to(args.device)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = step_model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if step >= args.warmup:
            times.append(dt)
    med = statistics.median(times)
    # Which kernel packages were importable: without fla and causal_conv1d transformers runs its
    # torch fallbacks of the Gated DeltaNet (the message it logs says so).
    hub = {p: importlib.util.find_spec(p) is not None for p in ("kernels", "fla", "causal_conv1d")}
    print(json.dumps({"impl": "pytorch", "model": type(model).__name__, "tokens_per_s": args.batch * args.seq / med,
                      "step_s": med, "step_times": times, "loss_first": losses[0], "loss_last": losses[-1],
                      "threads": args.threads, "bf16": args.bf16, "kernel_packages": hub,
                      "device": args.device, "compile": args.compile,
                      "max_cuda_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0,
                      "params": sum(p.numel() for p in model.parameters()),
                      "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                      "torch": torch.__version__}))


def from_config(path):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(path)))
    cfg.use_cache = False
    cfg._attn_implementation = "sdpa"
    return AutoModelForCausalLM.from_config(cfg).float().train()


def from_flags(args):
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
    return model


if __name__ == "__main__":
    main()
