#!/usr/bin/env python3
"""Golden fixtures for the Qwen3 dense model, from Hugging Face transformers (the oracle).

For each tiny configuration this writes tests/fixtures/qwen3/<name>/:
  config.json, model.safetensors   an HF checkpoint folder (save_pretrained, float32)
  tokens.txt                       the token batch, one sequence per line (titan score's input)
  golden.safetensors               f32 `logits` [B, S, V] and the gradient of the mean loss for
                                   every parameter under its HF name (tied embedding once)
  golden.json                      {"loss": ..., "tokens": ...}
The loss is transformers' own: model(input_ids, labels=input_ids).loss (labels shifted inside).

Run: python tools/oracle/qwen3_goldens.py [--out tests/fixtures/qwen3]
Needs: pip install torch transformers safetensors (never needed to build or test titan).
"""
import argparse
import os

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from model_goldens import randomize, write_fixture

# name, hidden, heads, kv_heads, head_dim, layers, intermediate, vocab, tied, batch, seq
CASES = [
    ("tied_gqa2_hd16", 48, 4, 2, 16, 2, 96, 128, True, 2, 9),     # head_dim != hidden / heads
    ("untied_gqa1", 32, 4, 4, 8, 3, 64, 96, False, 2, 7),
    ("tied_gqa4_odd", 40, 8, 2, 12, 2, 72, 97, True, 3, 5),       # odd vocab, GQA ratio 4
    ("untied_gqa2_long", 64, 4, 2, 16, 2, 128, 160, False, 1, 70),  # longer than one attention tile
]


def build(case, seed):
    name, hidden, heads, kv, hd, layers, inter, vocab, tied, batch, seq = case
    cfg = Qwen3Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, max_position_embeddings=256,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=tied, attention_bias=False,
        use_sliding_window=False, torch_dtype="float32")
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).float()
    return model, randomize(model, seed, vocab, batch, seq)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "qwen3"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    for i, case in enumerate(CASES):
        model, ids = build(case, 1234 + i)
        loss = write_fixture(os.path.join(args.out, case[0]), model, ids)
        print(case[0], "loss", loss)


if __name__ == "__main__":
    main()
