#!/usr/bin/env python3
"""Emulates titan's bf16-base LoRA arithmetic in PyTorch, to tell which bf16 rounding moves a
case's adapter gradients (a diagnostic, not a fixture writer).

titan's [lora] base_dtype = "bf16": every 2-D weight but the embedding held in bf16, and every
GEMM rounds its inputs to bf16 (forward X and W; backward dY and W for dX, dY and X for dW), the
adapters' GEMMs included (A and B themselves are f32); everything else f32. PEFT on a bf16 base
instead runs the whole base in bf16 and the adapters' GEMMs in f32 (autocast_adapter_dtype).
This patches torch.nn.functional.linear to titan's rounding over the f32 base with its 2-D
weights rounded, runs the case's PEFT adapter folder, and prints each adapter gradient's distance
to the f32 oracle (golden.safetensors) relative to its peak, as LoraBf16BaseGolden does.
--keep x|w|dy leaves that GEMM input unrounded (w: the adapters' A and B, the base's are bf16;
--keep w is titan's [lora] round_adapters = false).
--save FILE writes the emulated adapter gradients (titan's names) and `loss` [1]: the fixture
tests/fixtures/lora/qwen3_5_all_linear/golden_bf16_emulated.safetensors, and with --keep w
golden_bf16_emulated_unrounded_adapters.safetensors (LoraBf16BaseGolden.Qwen3_5MatchesItsEmulatedArithmetic).

Run: python tools/oracle/lora_bf16_emulation.py --case qwen3_5_all_linear [--keep w] [--save FILE]
"""
import argparse
import os

import torch
import torch.nn.functional as F
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import lora_goldens as L


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    ap.add_argument("--keep", choices=["x", "w", "dy"])
    ap.add_argument("--save", help="write the emulated adapter gradients (titan's names) to this file")
    args = ap.parse_args()
    torch.set_num_threads(2)
    rnd = lambda t: t.bfloat16().float()  # noqa: E731 (round to nearest even, as titan)
    bx, bd = [(lambda t: t) if args.keep == k else rnd for k in ("x", "dy")]
    # --keep w: only the adapters' A and B (the weights that train); every base weight stays
    # rounded, the tied lm_head (the f32 embedding, which the base's 2-D rounding skips) included.
    bw = lambda w: w if args.keep == "w" and w.requires_grad else rnd(w)  # noqa: E731

    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return bx(x) @ bw(w).t()

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            dw = None
            if w.requires_grad:
                dw = bd(dy).reshape(-1, dy.shape[-1]).t() @ bx(x).reshape(-1, x.shape[-1])
            return bd(dy) @ bw(w), dw

    out = os.path.join(L.FIXTURES, "lora", args.case)
    meta = __import__("json").load(open(os.path.join(out, "golden.json")))
    base = os.path.join(L.FIXTURES, meta["base"])
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2 and "embed_tokens" not in n:
                p.copy_(rnd(p))
    model = PeftModel.from_pretrained(model, os.path.join(out, "adapter"), is_trainable=True)
    name = L.titan_names(model)
    F.linear = lambda x, w, b=None: Linear.apply(x, w) if b is None else Linear.apply(x, w) + b
    ids = L.read_ids(os.path.join(base, "tokens.txt"))
    res = model(input_ids=ids, labels=ids)
    res.loss.backward()
    golden = load_file(os.path.join(out, "golden.safetensors"))
    worst = 0.0
    for n, p in model.named_parameters():
        if p.requires_grad:
            g = golden[name[n]]
            rel = float((p.grad - g).abs().max() / g.abs().max())
            worst = max(worst, rel)
            print("%-60s %.3f" % (name[n], rel))
    print("loss %.6f (f32 oracle %.6f), worst %.3f" % (res.loss.item(), meta["loss"], worst))
    if args.save:
        from safetensors.torch import save_file
        t = {name[n]: p.grad.detach().float().contiguous() for n, p in model.named_parameters() if p.requires_grad}
        t["loss"] = res.loss.detach().float().reshape(1)
        save_file(t, args.save, metadata={"format": "pt"})


if __name__ == "__main__":
    main()
