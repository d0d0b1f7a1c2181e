#!/usr/bin/env python3
"""PyTorch baseline for bench/distributed: data-parallel training of transformers' Qwen3ForCausalLM on CPU
with torch.distributed (gloo), N processes on this machine, 1 thread each. Every rank trains on
its own batch of random token ids (local batch x seq), full steps: forward, backward (gradient
reduction inside the wrapper), gradient clipping at 1.0, AdamW. Rank 0 prints one JSON line:
median step time after the warm-up, total tokens/s and every rank's max RSS.

  --wrap fsdp: FSDP2, torch.distributed.fsdp.fully_shard on every decoder layer, then the root
               (embedding, final norm and the tied lm_head form the root's group), parameters
               resharded after forward (the default, as titan's).
  --wrap ddp : DistributedDataParallel (gradients all-reduced in buckets during the backward).
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def build_model(args):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, head_dim=args.head_dim, tie_word_embeddings=True,
                      max_position_embeddings=2048, rope_theta=args.rope_theta, rms_norm_eps=1e-6, use_cache=False)
    cfg._attn_implementation = "sdpa"
    return Qwen3ForCausalLM(cfg).float().train()


def current_rss_gib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def worker(rank, args):
    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    base_rss = current_rss_gib()  # the interpreter, torch and gloo before any model memory
    torch.manual_seed(0)  # the same initial weights on every rank
    model = build_model(args)
    if args.wrap == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
    g = torch.Generator().manual_seed(1 + rank)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)
        x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        dist.barrier()
        t0 = time.perf_counter()
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, args.vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # a data-parallel step ends when its slowest rank does
        losses.append(loss.item())
        if step >= args.warmup:
            times.append(dt.item())
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, base_rss], dtype=torch.float64)
    all_rss = [torch.zeros(2, dtype=torch.float64) for _ in range(args.ranks)]
    dist.all_gather(all_rss, rss)
    if rank == 0:
        med = statistics.median(times)
        print(json.dumps({"impl": "pytorch-" + args.wrap, "ranks": args.ranks, "step_s": med,
                          "tokens_per_s_total": args.ranks * args.batch * args.seq / med,
                          "max_rss_gib": [round(r[0].item(), 4) for r in all_rss],
                          "base_rss_gib": [round(r[1].item(), 4) for r in all_rss], "loss_first": losses[0],
                          "loss_last": losses[-1], "threads_per_rank": args.threads, "torch": torch.__version__}),
              flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wrap", choices=["fsdp", "ddp"], default="fsdp")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--rope-theta", type=float, default=1e6)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--port", type=int, default=29571)
    args = ap.parse_args()
    mp.start_processes(worker, args=(args,), nprocs=args.ranks, start_method="spawn", join=True)


if __name__ == "__main__":
    main()
