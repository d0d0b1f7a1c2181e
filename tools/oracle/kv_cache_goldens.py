#!/usr/bin/env python3
"""Golden fixtures for titan's KV-cache generation (src/infer/kv_source.*), from transformers.

For the dense fixture model tests/fixtures/qwen3/untied_gqa2_long and the MoE one
tests/fixtures/qwen3_moe/aux_norm (both HF folders with random weights) this runs transformers'
greedy generate(do_sample=False, use_cache=True) on a batch of three prompts of different lengths,
left-padded with an attention mask, for 64 new tokens with no EOS, and writes
tests/fixtures/kv_cache/<name>.safetensors:
  prompt_<r>   i64 [len_r]          the prompts (random ids: the first seed whose run has no near tie)
  ids          i64 [3, 64]          the generated ids
  logits       f32 [64, 3, vocab]   the raw next-token logits of every step (output_logits)
  min_gap      f32 [1]              the smallest top-1 / top-2 logit gap met on the way (a tie would
                                    make greedy ids fragile; the script fails below 1e-3)
  logits_f64   f32 [64, 3, vocab]   (Qwen3.5 cases) the same logits from the model in float64, one
                                    uncached forward over prompts + generated ids (f64_logits)
and checks on the way that each row's ids equal its unpadded run alone.

The Qwen3.5 cases (qwen3_5_dense, qwen3_5_moe: the fixture models tests/fixtures/qwen3_5/
dense_lin_lin_full and moe_lin_full) use prompts of 5, 37 and 20 tokens, so the padded prefill
crosses titan's 16-token delta-rule chunks with up to 32 padding columns in front. transformers
masks a linear-attention layer's padding columns there: its input hidden states are multiplied by
the attention mask before the projections (apply_mask_to_padding_states, on a multi-token forward
whose mask is not all ones), so the conv and the recurrent state see zeros through the padding.

Run: /work/venv-oracle/bin/python tools/oracle/kv_cache_goldens.py [--cases qwen3_5_dense,qwen3_5_moe]
(default: every case)
"""
import argparse
import os

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "kv_cache")
CASES = [("dense", "tests/fixtures/qwen3/untied_gqa2_long", [5, 17, 11]),
         ("moe", "tests/fixtures/qwen3_moe/aux_norm", [5, 17, 11]),
         ("qwen3_5_dense", "tests/fixtures/qwen3_5/dense_lin_lin_full", [5, 37, 20]),
         ("qwen3_5_moe", "tests/fixtures/qwen3_5/moe_lin_full", [5, 37, 20])]
NEW = 64
PAD = 0


def run(model, prompts):
    width = max(len(p) for p in prompts)
    inp = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = model.generate(inp, attention_mask=mask, do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW,
                             use_cache=True, output_logits=True, return_dict_in_generate=True, eos_token_id=None,
                             pad_token_id=PAD)
    return out.sequences[:, width:], torch.stack(out.logits)  # [rows, NEW], [NEW, rows, V]


def f64_logits(folder, prompts, ids):
    """The same model in float64, one forward over the padded prompts and the generated ids (mask
    and positions as generate makes them): the logits that predicted each generated token. The
    Qwen3.5 fixtures are conditioned so that f32 rounding alone moves their logits by ~1e-4 over
    the 64 steps (transformers' own f32 run included); this is the exact value to measure both by."""
    model = AutoModelForCausalLM.from_pretrained(os.path.join(ROOT, folder), dtype=torch.float64,
                                                 attn_implementation="eager").eval()
    if hasattr(model.config, "_experts_implementation"):
        model.config._experts_implementation = "eager"
    model.config.output_router_logits = False
    width = max(len(p) for p in prompts)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    mask = torch.cat([mask, torch.ones_like(ids)], 1)
    full = torch.cat([torch.tensor([[PAD] * (width - len(p)) + p for p in prompts]), ids], 1)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    with torch.inference_mode():
        out = model(full, attention_mask=mask, position_ids=pos).logits
    return out[:, width - 1:width - 1 + ids.shape[1]].transpose(0, 1).double()  # [NEW, rows, V]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(c[0] for c in CASES))
    args = ap.parse_args()
    wanted = args.cases.split(",")
    assert all(w in [c[0] for c in CASES] for w in wanted), wanted
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(2)
    for name, folder, lens in CASES:
        if name not in wanted:
            continue
        model = AutoModelForCausalLM.from_pretrained(os.path.join(ROOT, folder), dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        if hasattr(model.config, "_experts_implementation"):
            model.config._experts_implementation = "eager"
        # The router logits only feed the auxiliary loss (transformers' load_balancing_loss_func
        # fails on a cached step with an attention mask); the logits do not depend on it.
        model.config.output_router_logits = False
        V = model.config.vocab_size
        # The first prompt seed whose greedy run has no near tie.
        for seed in range(100):
            g = torch.Generator().manual_seed(seed)
            prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in lens]
            ids, logits = run(model, prompts)
            top2 = torch.topk(logits, 2, dim=-1).values
            gap = float((top2[..., 0] - top2[..., 1]).min())
            if gap > 1e-3:
                break
        assert gap > 1e-3, (name, gap)
        for r, p in enumerate(prompts):
            alone, _ = run(model, [p])
            assert alone[0].tolist() == ids[r].tolist(), (name, r)
        t = {f"prompt_{r}": torch.tensor(p, dtype=torch.int64) for r, p in enumerate(prompts)}
        t.update(ids=ids.to(torch.int64).contiguous(), logits=logits.float().contiguous(),
                 min_gap=torch.tensor([gap], dtype=torch.float32))
        if name.startswith("qwen3_5"):
            t["logits_f64"] = f64_logits(folder, prompts, ids).float().contiguous()
            print(name, "f32 noise: max |generate's f32 logits - f64|",
                  float((logits.double() - f64_logits(folder, prompts, ids)).abs().max()))
        save_file(t, os.path.join(OUT, name + ".safetensors"), metadata={"model": folder})
        print(name, "min gap", gap, "ids row 0", ids[0, :12].tolist())


if __name__ == "__main__":
    main()
