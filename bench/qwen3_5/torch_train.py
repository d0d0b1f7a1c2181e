#!/usr/bin/env python3
"""transformers baseline for bench/qwen3_5: full training steps (forward + backward + gradient
clipping + AdamW) of Qwen3_5ForCausalLM built from a config.json (random init, f32), on the given
threads. Its Gated DeltaNet runs transformers' torch fallbacks (torch_chunk_gated_delta_rule,
chunk 64, and the conv without causal_conv1d) since FLA and causal-conv1d are not installed.
Prints one JSON line: median step time and tokens/s after warm-up.
usage: torch_train.py CONFIG_JSON --batch 1 --seq 512 --steps 3 --warmup 2 --threads 2 [--bf16]"""
import argparse
import json
import resource
import statistics
import time

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--seq", type=int, default=512)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--bf16", action="store_true", help="autocast matmuls to bf16 (f32 master weights)")
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
cfg = Qwen3_5TextConfig.from_json_file(a.config)
cfg.use_cache = False
cfg._attn_implementation = "sdpa"
model = Qwen3_5ForCausalLM(cfg).float().train()
# transformers 5.25 calls its torch fallbacks (torch_chunk_gated_delta_rule, the conv through
# nn.Conv1d) unless the `kernels` package swaps in hub kernels; record whether it could.
import importlib.util
hub = {p: importlib.util.find_spec(p) is not None for p in ("kernels", "fla", "causal_conv1d")}
V = cfg.vocab_size
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
g = torch.Generator().manual_seed(1)
times, losses = [], []
for step in range(a.warmup + a.steps):
    ids = torch.randint(0, V, (a.batch, a.seq + 1), generator=g)
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
        logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, V), y.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    dt = time.perf_counter() - t0
    losses.append(loss.item())
    if step >= a.warmup:
        times.append(dt)
med = statistics.median(times)
print(json.dumps({"impl": "transformers", "tokens_per_s": a.batch * a.seq / med, "step_s": med,
                  "step_times": times, "loss_first": losses[0], "loss_last": losses[-1], "threads": a.threads,
                  "bf16": a.bf16, "kernel_packages": hub,
                  "params": sum(p.numel() for p in model.parameters()),
                  "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "torch": torch.__version__}))
