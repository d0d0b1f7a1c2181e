#!/usr/bin/env python3
"""transformers' torch_chunk_gated_delta_rule (qwen3_5 torch fallback, chunk 64, q/k L2 norm in the kernel)
forward and forward+backward (autograd) on the shape of bench_gated_delta, same threads.

    OMP_NUM_THREADS=2 /work/venv/bin/python bench/gated_delta/hf_gated_delta.py [S] [threads] [heads] [d]
"""
import sys
import time

import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as m

S, T, H, D = [int(a) for a in sys.argv[1:5]] + [1024, 2, 16, 128][len(sys.argv[1:5]):]
torch.set_num_threads(T)
gen = torch.Generator().manual_seed(7)
q, k, v, dout = (torch.randn(1, S, H, D, generator=gen) for _ in range(4))
g = -torch.nn.functional.softplus(torch.randn(1, S, H, generator=gen) - 1.0)
beta = torch.sigmoid(torch.randn(1, S, H, generator=gen))
fwd = bwd = 1e30
for _ in range(3):
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
    t0 = time.perf_counter()
    out, _ = m.torch_chunk_gated_delta_rule(*leaves[:3], g=leaves[3], beta=leaves[4], use_qk_l2norm_in_kernel=True)
    t1 = time.perf_counter()
    (out * dout).sum().backward()
    t2 = time.perf_counter()
    fwd, bwd = min(fwd, t1 - t0), min(bwd, t2 - t1)
with torch.no_grad():
    t0 = time.perf_counter()
    m.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)
    nograd = time.perf_counter() - t0
print(f"transformers torch_chunk_gated_delta_rule S={S} heads={H} d={D} threads={T} torch {torch.__version__}")
print(f"chunk=64 forward {fwd * 1e3:.1f} ms (no_grad {nograd * 1e3:.1f} ms)  forward+backward {(fwd + bwd) * 1e3:.1f} ms"
      f"  ({S / (fwd + bwd):.0f} tokens/s fwd+bwd)")
