#!/usr/bin/env python3
"""Golden values for causal GQA attention from Hugging Face transformers (the oracle).

Runs transformers' Qwen3 eager_attention_forward (repeat_kv, scaled q.k^T, additive causal mask,
softmax, @ v) on small random f32 inputs, computed in float64, with autograd for the gradients of
loss = sum(out * dout); lse is torch.logsumexp of the masked scaled scores. Writes
tests/fixtures/ops/attention_hf.json, tensors flattened in the layouts of src/ops/attention/attention.h
(q, out, dout, dq: [B, S, Hq, D]; k, v, dk, dv: [B, S, Hkv, D]; lse: [B, Hq, S]).

    /work/venv-oracle/bin/python tools/oracle/attention_fixture.py
"""
import json
import os
import types

import numpy as np
import torch
import transformers
from transformers.models.qwen3.modeling_qwen3 import eager_attention_forward

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "ops",
                   "attention_hf.json")


def f32_list(t):
    # str of a numpy float32 is the shortest decimal that reads back to that f32
    return [float(str(x)) for x in t.detach().to(torch.float32).reshape(-1).numpy()]


def case(gen, B, S, Hq, Hkv, D):
    def randn(*shape):
        # f32 values (what the C++ test feeds), promoted to float64 for the computation
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(torch.float64)

    q, k, v, dout = randn(B, S, Hq, D), randn(B, S, Hkv, D), randn(B, S, Hkv, D), randn(B, S, Hq, D)
    scale = float(np.float32(D ** -0.5))
    qh, kh, vh = (x.transpose(1, 2).clone().requires_grad_(True) for x in (q, k, v))  # [B, H, S, D] as HF
    mask = torch.full((S, S), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)[None, None]
    module = types.SimpleNamespace(num_key_value_groups=Hq // Hkv, training=False)
    out, _ = eager_attention_forward(module, qh, kh, vh, mask, scaling=scale)  # [B, S, Hq, D]
    (out * dout).sum().backward()
    kr = kh.detach().repeat_interleave(Hq // Hkv, dim=1)
    scores = (qh.detach() @ kr.transpose(2, 3)) * scale + mask
    lse = torch.logsumexp(scores, dim=-1)  # [B, Hq, S]
    return {"B": B, "S": S, "Hq": Hq, "Hkv": Hkv, "D": D, "scale": scale,
            "q": f32_list(q), "k": f32_list(k), "v": f32_list(v), "dout": f32_list(dout),
            "out": f32_list(out), "lse": f32_list(lse),
            "dq": f32_list(qh.grad.transpose(1, 2)), "dk": f32_list(kh.grad.transpose(1, 2)),
            "dv": f32_list(vh.grad.transpose(1, 2))}


def main():
    gen = torch.Generator().manual_seed(20260530)
    cases = [case(gen, 2, 7, 4, 2, 8), case(gen, 1, 9, 3, 3, 5), case(gen, 1, 66, 2, 1, 8)]
    doc = {"source": f"transformers {transformers.__version__} Qwen3 eager_attention_forward, torch "
                     f"{torch.__version__}, float64 (softmax in float32 as HF casts it)",
           "cases": cases}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
