#!/usr/bin/env python3
"""Golden values for single ops, from Hugging Face transformers / torch (the oracle).

Writes tests/fixtures/ops/rope_hf.json (Qwen3RotaryEmbedding's cos/sin at selected positions) and
tests/fixtures/ops/adamw_torch.json (torch.optim.AdamW steps on a small f32 tensor). Every f32 value
is written as the shortest decimal that reads back to the same f32.

    /work/venv-oracle/bin/python tools/oracle/ops_fixtures.py
"""
import json
import os

import numpy as np
import torch
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "ops")


def f32_list(t):
    # str of a numpy float32 is the shortest decimal that reads back to that f32
    return [float(str(x)) for x in t.detach().to(torch.float32).reshape(-1).numpy()]


def rope_cases():
    positions = [0, 1, 2, 3, 17, 100, 511, 1000, 4095, 8191, 32767, 40959]
    cases = []
    for head_dim, theta in [(128, 1_000_000.0), (64, 1_000_000.0), (64, 10_000.0)]:
        cfg = Qwen3Config(hidden_size=head_dim * 2, num_attention_heads=2, num_key_value_heads=1, head_dim=head_dim,
                          rope_theta=theta, max_position_embeddings=40960)
        rot = Qwen3RotaryEmbedding(config=cfg)
        pos = torch.tensor([positions], dtype=torch.int64)
        x = torch.zeros(1, len(positions), head_dim, dtype=torch.float32)
        cos, sin = rot(x, pos)
        cases.append({"head_dim": head_dim, "theta": theta, "positions": positions,
                      "inv_freq": f32_list(rot.inv_freq), "cos": f32_list(cos[0]), "sin": f32_list(sin[0])})
    return {"source": f"transformers Qwen3RotaryEmbedding, torch {torch.__version__}", "cases": cases}


def adamw_cases():
    cases = []
    g = torch.Generator().manual_seed(1234)
    n = 64  # a multiple of 16: every element goes through ATen's vectorized loops
    for lr, betas, eps, wd in [(1e-3, (0.9, 0.999), 1e-8, 0.01), (3e-4, (0.9, 0.95), 1e-8, 0.1),
                               (0.1, (0.8, 0.99), 1e-6, 0.0)]:
        p0 = torch.randn(n, generator=g, dtype=torch.float32)
        grads = [torch.randn(n, generator=g, dtype=torch.float32) * s for s in (1.0, 0.01, 3.0, 1e-4)]
        results = {}
        for foreach in (False, None):  # explicit single-tensor path, and torch's default choice
            p = torch.nn.Parameter(p0.clone())
            opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=foreach)
            steps = []
            for gr in grads:
                p.grad = gr.clone()
                opt.step()
                st = opt.state[p]
                steps.append({"param": f32_list(p), "exp_avg": f32_list(st["exp_avg"]),
                              "exp_avg_sq": f32_list(st["exp_avg_sq"])})
            results[foreach] = steps
        assert results[False] == results[None], "torch's default AdamW path differs from the single-tensor one"
        cases.append({"lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": wd,
                      "param0": f32_list(p0), "grads": [f32_list(x) for x in grads], "steps": results[False]})
    return {"source": f"torch.optim.AdamW(foreach=False), torch {torch.__version__}", "cases": cases}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in [("rope_hf.json", rope_cases()), ("adamw_torch.json", adamw_cases())]:
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.write("\n")
        print("wrote", os.path.join(OUT, name))


if __name__ == "__main__":
    main()
