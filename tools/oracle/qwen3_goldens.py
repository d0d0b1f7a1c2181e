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
import json
import os

import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

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
    # Random, non-trivial weights everywhere (norm weights too, so their gradients are exercised).
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    return model, ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "qwen3"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    for i, case in enumerate(CASES):
        model, ids = build(case, 1234 + i)
        out = os.path.join(args.out, case[0])
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        for extra in ("generation_config.json",):
            p = os.path.join(out, extra)
            if os.path.exists(p):
                os.remove(p)
        model.zero_grad()
        res = model(input_ids=ids, labels=ids)
        res.loss.backward()
        tensors = {"logits": res.logits.detach().float().contiguous()}
        for pname, p in model.named_parameters():
            tensors[pname] = p.grad.detach().float().contiguous()
        save_file(tensors, os.path.join(out, "golden.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(out, "tokens.txt"), "w") as f:
            for row in ids.tolist():
                f.write(" ".join(str(t) for t in row) + "\n")
        n_tokens = ids.shape[0] * (ids.shape[1] - 1)
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump({"loss": float(res.loss.item()), "tokens": n_tokens,
                       "transformers": __import__("transformers").__version__,
                       "torch": torch.__version__}, f, indent=1)
        print(case[0], "loss", res.loss.item())


if __name__ == "__main__":
    main()
