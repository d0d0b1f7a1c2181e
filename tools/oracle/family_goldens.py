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
import json
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

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
    with torch.no_grad():  # random, non-trivial weights everywhere (norms and biases too)
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
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    for i, case in enumerate(CASES):
        model, ids = build(case, 4321 + i)
        out = os.path.join(args.out, case[0], case[1])
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        p = os.path.join(out, "generation_config.json")
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
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump({"loss": float(res.loss.item()), "tokens": ids.shape[0] * (ids.shape[1] - 1),
                       "transformers": __import__("transformers").__version__,
                       "torch": torch.__version__}, f, indent=1)
        print(case[0], case[1], "loss", res.loss.item())


if __name__ == "__main__":
    main()
