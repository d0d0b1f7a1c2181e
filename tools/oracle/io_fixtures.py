#!/usr/bin/env python3
"""Checkpoint folders written by Hugging Face transformers, for titan's HF-folder reader tests.

Writes tests/fixtures/io/<name>/ with save_pretrained (the files exactly as transformers and the
safetensors library lay them out, including its own sharding and index):
  tied_bf16       tied embedding, bfloat16, one model.safetensors
  untied_sharded  untied lm_head, float32, max_shard_size small enough for 3 shards + index
Every parameter holds values the C++ test recomputes: for the k-th parameter in titan's module
order (model_param_specs) and flat index i, ((7 i + 13 k) mod 251 - 125) / 8, exact in bf16.

Run: python tools/oracle/io_fixtures.py [--out tests/fixtures/io]
Needs: pip install torch transformers safetensors (never needed to build or test titan).
"""
import argparse
import os

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV, HEAD_DIM = 32, 16, 24, 2, 2, 1, 8


def titan_order(layers, tied):
    names = ["model.embed_tokens.weight"]
    for i in range(layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                  p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight", p + "self_attn.q_norm.weight",
                  p + "self_attn.k_norm.weight", p + "post_attention_layernorm.weight", p + "mlp.gate_proj.weight",
                  p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
    names.append("model.norm.weight")
    if not tied:
        names.append("lm_head.weight")
    return names


def write(out, name, tied, dtype, max_shard):
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=HEAD_DIM,
                      max_position_embeddings=128, rope_theta=10000.0, tie_word_embeddings=tied)
    model = Qwen3ForCausalLM(cfg)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, n in enumerate(titan_order(LAYERS, tied)):
            p = params[n]
            i = torch.arange(p.numel(), dtype=torch.int64)
            p.copy_((((7 * i + 13 * k) % 251 - 125).float() / 8).reshape(p.shape))
    model = model.to(dtype)
    path = os.path.join(out, name)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, max_shard_size=max_shard)
    gen = os.path.join(path, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "io"))
    a = ap.parse_args()
    write(a.out, "tied_bf16", True, torch.bfloat16, "5GB")
    write(a.out, "untied_sharded", False, torch.float32, "8KB")


if __name__ == "__main__":
    main()
