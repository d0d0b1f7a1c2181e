#!/usr/bin/env python3
"""Golden fixtures for the Llama and Qwen2 families, from Hugging Face transformers (the oracle).

The same layout as qwen3_goldens.py, under tests/fixtures/<family>/<case>/:
  config.json, model.safetensors   an HF checkpoint folder (save_pretrained, float32)
  tokens.txt                       the token batch, one sequence per line
  golden.safetensors               f32 `logits` [B, S, V] and the gradient of the mean loss for
                                   every parameter under its HF name (Qwen2's q/k/v biases included)
  golden.json                      {"loss": ..., "tokens": ...}
Cases cover: head_dim absent (hidden / heads) and explicit (!= hidden / heads), tied and untied
embeddings, GQA, and Llama 3's rope scaling with an original context short enough that all three
frequency bands (kept, interpolated, divided) occur.

Run: python tools/oracle/family_goldens.py [--out tests/fixtures]
Needs: pip install torch transformers safetensors (never needed to build or test titan).
"""
import argparse
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from model_goldens import randomize, write_fixture

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}

# family, name, hidden, heads, kv_heads, head_dim (None: absent), layers, intermediate, vocab, tied,
# batch, seq, rope scaling (None: plain)
CASES = [
    ("llama", "tied_gqa2", 48, 4, 2, None, 2, 96, 128, True, 2, 9, None),
    ("llama", "untied_hd16_gqa4", 40, 8, 2, 16, 2, 72, 97, False, 3, 5, None),
    ("llama", "llama3_rope_long", 64, 4, 2, None, 2, 128, 160, True, 1, 70, LLAMA3),
    ("qwen2", "tied_gqa2", 48, 4, 2, None, 2, 96, 128, True, 2, 9, None),
    ("qwen2", "untied_gqa1_long", 32, 4, 4, None, 3, 64, 96, False, 1, 70, None),
]


def build(case, seed):
    family, name, hidden, heads, kv, hd, layers, inter, vocab, tied, batch, seq, scaling = case
    kw = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=256,
              rms_norm_eps=1e-6, tie_word_embeddings=tied)
    rope = {"rope_type": "default", "rope_theta": 10000.0} if scaling is None else dict(scaling, rope_theta=10000.0)
    kw["rope_parameters"] = rope
    if hd is not None:
        kw["head_dim"] = hd
    if family == "llama":
        cfg = LlamaConfig(attention_bias=False, mlp_bias=False, **kw)
        cls = LlamaForCausalLM
    else:
        cfg = Qwen2Config(use_sliding_window=False, **kw)
        cls = Qwen2ForCausalLM
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(cfg).float()
    return model, randomize(model, seed, vocab, batch, seq)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    for i, case in enumerate(CASES):
        model, ids = build(case, 4321 + i)
        loss = write_fixture(os.path.join(args.out, case[0], case[1]), model, ids)
        print(case[0], case[1], "loss", loss)


if __name__ == "__main__":
    main()
