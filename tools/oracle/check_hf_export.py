#!/usr/bin/env python3
"""Reload a titan export with Hugging Face transformers and compare its logits with titan's.

usage: check_hf_export.py --model DIR --tokens FILE --logits FILE [--tol 1e-3]
  DIR     an HF folder written by titan (export / last_save_in_hf)
  FILE    token ids, one sequence per line (titan score's input)
  logits  safetensors with f32 `logits` [B, S, V] from `titan score --dump-logits`
Exit 0 when transformers loads the folder with no missing or unexpected keys and the logits agree.
"""
import argparse
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--logits", required=True)
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    model, info = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32,
                                                       attn_implementation="eager", output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        print("transformers loading problems:", bad)
        return 1
    ids = torch.tensor([[int(t) for t in line.split()] for line in open(a.tokens) if line.strip()])
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    ref = load_file(a.logits)["logits"]
    diff = (logits - ref).abs().max().item()
    tied = model.config.tie_word_embeddings
    same = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    print(f"transformers reload: logits max abs diff {diff:.3g} (tol {a.tol}); tied={tied} lm_head shares embedding={same}")
    if tied and not same:
        return 1
    return 0 if diff <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
