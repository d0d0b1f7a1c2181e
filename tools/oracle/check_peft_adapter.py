#!/usr/bin/env python3
"""Load a titan-written LoRA adapter with peft.PeftModel.from_pretrained and compare its logits.

usage: check_peft_adapter.py --base DIR --adapter DIR --tokens FILE --logits FILE [--tol 1e-3]
  base     the HF base model folder
  adapter  a PEFT adapter folder written by titan (export --adapter / a LoRA run's last_save_in_hf)
  tokens   token ids, one sequence per line
  logits   safetensors with f32 `logits` [B, S, V] that titan computed with the adapter
Exit 0 when peft loads every adapter tensor (none missing or unexpected) and the logits agree.
"""
import argparse
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--logits", required=True)
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    base = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, a.adapter)
    # Every adapter tensor of the file must have landed in a LoRA layer (none left at its init).
    stored = load_file(a.adapter + "/adapter_model.safetensors")
    params = {n.replace(".default", ""): p for n, p in model.named_parameters() if "lora_" in n}
    if set(stored) != set(params):
        print("adapter tensors differ from the LoRA layers peft built:", sorted(set(stored) ^ set(params))[:6])
        return 1
    worst_w = max((stored[n].float() - params[n].detach().float()).abs().max().item() for n in stored)
    ids = torch.tensor([[int(t) for t in line.split()] for line in open(a.tokens) if line.strip()])
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    ref = load_file(a.logits)["logits"].view_as(logits)
    diff = (logits - ref).abs().max().item()
    print(f"peft reload: {len(stored)} adapter tensors (max weight diff {worst_w:.3g}), "
          f"logits max abs diff {diff:.3g} (tol {a.tol})")
    return 0 if diff <= a.tol and worst_w == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
