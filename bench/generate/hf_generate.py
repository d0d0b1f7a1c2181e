#!/usr/bin/env python3
"""transformers' generate on the bench model, timed the way titan reports it: prefill = the
prompt's forward up to the first token's logits, decode = each later token's step. A logits
processor takes a timestamp at every step (it runs right after each forward), so
  prefill tokens/s = prompt_len / (t[0] - start),  decode tokens/s = (n - 1) / (t[n-1] - t[0]).
Best settings: torch.inference_mode, use_cache=True, greedy, the given thread count (jemalloc
and OPENBLAS_CORETYPE are the caller's environment). Prints one JSON line.
usage: hf_generate.py MODEL_DIR --dtype f32|bf16 --prompt-len 512 --new 128 --threads 2"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--dtype", default="f32")
ap.add_argument("--prompt-len", type=int, default=512)
ap.add_argument("--new", type=int, default=128)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
torch.set_num_threads(a.threads)
dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dt).eval()
V = model.config.vocab_size
ids = torch.randint(0, V, (1, a.prompt_len), generator=torch.Generator().manual_seed(a.seed))


class Clock(LogitsProcessor):
    def __init__(self):
        self.t = []

    def __call__(self, input_ids, scores):
        self.t.append(time.perf_counter())
        return scores


with torch.inference_mode():
    model.generate(ids[:, :16], attention_mask=torch.ones_like(ids[:, :16]), do_sample=False, max_new_tokens=4,
                   min_new_tokens=4, use_cache=True)  # warm-up
    clock = Clock()
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=a.new,
                         min_new_tokens=a.new, use_cache=True, logits_processor=LogitsProcessorList([clock]))
n = out.shape[1] - a.prompt_len
print(json.dumps({"prefill_tps": a.prompt_len / (clock.t[0] - t0),
                  "decode_tps": (n - 1) / (clock.t[n - 1] - clock.t[0]), "new": n,
                  "ids": out[0, a.prompt_len:a.prompt_len + 16].tolist()}))
