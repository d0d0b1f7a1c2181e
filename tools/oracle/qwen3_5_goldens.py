#!/usr/bin/env python3
"""Whole-model golden fixtures for Qwen3.5 (dense and MoE), from transformers' qwen3_5 /
qwen3_5_moe with its torch fallback kernels (torch_chunk_gated_delta_rule, torch causal conv).

The layout of model_goldens.py, under tests/fixtures/qwen3_5/<case>/:
  config.json, model.safetensors   an HF checkpoint folder (Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM, f32)
  tokens.txt                       the token batch
  golden.safetensors               logits and the gradient of the mean loss for every parameter
  golden.json                      loss, tokens, versions; "generate": 64 greedy tokens of the
                                   first row's first 9 tokens by transformers' cached generate
Cases: several layer patterns (linear/full), sequences longer than a chunk (16, titan's
default; transformers uses 64) and not a multiple of it, linear value heads a multiple (1, 2) of
the key heads, tied and untied heads, and a MoE model with a shared expert.

Run: /work/venv/bin/python tools/oracle/qwen3_5_goldens.py [--out tests/fixtures/qwen3_5]
"""
import argparse
import json
import os

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

from model_goldens import randomize, write_fixture
from qwen3_moe_goldens import per_expert_grads

# name, layer_types, linear (Hk, Hv, dk, dv), heads, kv heads, head_dim, tied, batch, seq, moe
L, F = "linear_attention", "full_attention"
CASES = [
    ("dense_lin_lin_full", [L, L, F], (2, 4, 16, 8), 4, 2, 16, True, 2, 37, False),
    ("dense_full_lin_gqa1", [F, L], (2, 2, 8, 16), 2, 1, 32, False, 1, 70, False),
    ("moe_lin_full", [L, F], (1, 2, 16, 16), 4, 2, 16, False, 2, 21, True),
]


def build(case, seed):
    name, types, (hk, hv, dk, dv), heads, kv, hd, tied, batch, seq, moe = case
    vocab = 128
    kw = dict(vocab_size=vocab, hidden_size=48, num_hidden_layers=len(types), num_attention_heads=heads,
              num_key_value_heads=kv, head_dim=hd, max_position_embeddings=256, rms_norm_eps=1e-6,
              tie_word_embeddings=tied, layer_types=types, linear_num_key_heads=hk, linear_num_value_heads=hv,
              linear_key_head_dim=dk, linear_value_head_dim=dv, linear_conv_kernel_dim=4,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
    if moe:
        cfg = Qwen3_5MoeTextConfig(moe_intermediate_size=24, shared_expert_intermediate_size=40, num_experts=4,
                                   num_experts_per_tok=2, **kw)
        cls = Qwen3_5MoeForCausalLM
    else:
        cfg = Qwen3_5TextConfig(intermediate_size=96, **kw)
        cls = Qwen3_5ForCausalLM
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(cfg).float()
    ids = randomize(model, seed, vocab, batch, seq)
    with torch.no_grad():  # decays of a realistic range: A = exp(A_log) in (0.2, 1.5)
        for pname, p in model.named_parameters():
            if pname.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(-1.5, 0.4))
    return model, ids


def greedy(model, ids, n):
    model.eval()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0,
                             eos_token_id=None)
    model.train()
    return out[0, ids.shape[1]:].tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                                                  "qwen3_5"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    for i, case in enumerate(CASES):
        model, ids = build(case, 2718 + i)
        prompt = ids[:1, :9]
        gen = greedy(model, prompt, 64)
        out = os.path.join(args.out, case[0])
        loss = write_fixture(out, model, ids, grads=per_expert_grads,
                             extra={"prompt": prompt[0].tolist(), "generate": gen})
        print(case[0], "loss", loss)


if __name__ == "__main__":
    main()
