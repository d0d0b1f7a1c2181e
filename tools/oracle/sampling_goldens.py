#!/usr/bin/env python3
"""Golden fixtures for the logits processors (src/infer/sampling.*), from transformers (the oracle).

Writes tests/fixtures/sampling/processors.json: for fixed f32 logits rows and contexts, the scores
after transformers' RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper and MinPLogitsWarper, applied in the order GenerationMixin._get_logits_processor
builds them for generate(do_sample=True) (the script checks that order against transformers
itself), and the softmax of the result. Filtered scores are written as null (-inf).

Run: /work/venv-oracle/bin/python tools/oracle/sampling_goldens.py
Needs: pip install torch transformers.
"""
import json
import os

import torch
import transformers
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
from transformers.generation.logits_process import (LogitsProcessorList, MinPLogitsWarper,
                                                    RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                                                    TopKLogitsWarper, TopPLogitsWarper)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "sampling", "processors.json")
V = 64

# name, temperature, top_k, top_p, min_p, repetition_penalty
PARAMS = [
    ("penalty_only", None, None, None, None, 1.3),
    ("reward", None, None, None, None, 0.7),
    ("temperature", 0.7, None, None, None, None),
    ("hot", 1.8, None, None, None, None),
    ("top_k", None, 5, None, None, None),
    ("top_k_1", None, 1, None, None, None),
    ("top_p", None, None, 0.8, None, None),
    ("top_p_small", None, None, 0.05, None, None),
    ("min_p", None, None, None, 0.1, None),
    ("min_p_high", None, None, None, 0.9, None),
    ("all", 0.6, 20, 0.95, 0.05, 1.1),
    ("qwen3_thinking_defaults", 0.6, 20, 0.95, 0.0, None),
    ("all_penalty_reward", 1.3, 12, 0.7, 0.02, 0.8),
    ("top_k_larger_than_vocab", 1.0, 1000, None, None, None),
]


def processors(temperature, top_k, top_p, min_p, penalty):
    procs = LogitsProcessorList()
    if penalty is not None:
        procs.append(RepetitionPenaltyLogitsProcessor(penalty))
    if temperature is not None and temperature != 1.0:
        procs.append(TemperatureLogitsWarper(temperature))
    if top_k is not None and top_k != 0:
        procs.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    if min_p is not None:
        procs.append(MinPLogitsWarper(min_p))
    return procs


def generate_order(temperature, top_k, top_p, min_p, penalty):
    """The processor classes generate() itself builds for these settings (on a tiny model)."""
    cfg = Qwen3Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=8)
    model = Qwen3ForCausalLM(cfg)
    kw = {"do_sample": True, "temperature": temperature if temperature is not None else 1.0,
          "top_k": top_k if top_k is not None else 0, "top_p": top_p if top_p is not None else 1.0}
    if min_p is not None:
        kw["min_p"] = min_p
    if penalty is not None:
        kw["repetition_penalty"] = penalty
    gc = GenerationConfig(**kw)
    procs = model._get_logits_processor(generation_config=gc, input_ids_seq_length=4, encoder_input_ids=None,
                                        prefix_allowed_tokens_fn=None, logits_processor=LogitsProcessorList(),
                                        device="cpu", model_kwargs={})
    return [type(p).__name__ for p in procs]


def main():
    torch.manual_seed(7)
    rows = []
    # Random logits with a spread like a model's; one row with exact ties for top-k.
    base = [torch.randn(V) * 3.0 for _ in range(3)]
    tied = torch.randn(V)
    tied[10] = tied[11] = tied[12] = 4.0
    tied[13] = 3.5
    base.append(tied)
    contexts = [[1, 5, 5, 9, 63, 2], [0], [3, 4, 10, 11, 12, 40, 41], [12, 13]]
    for pname, temperature, top_k, top_p, min_p, penalty in PARAMS:
        names = [type(p).__name__ for p in processors(temperature, top_k, top_p, min_p, penalty)]
        order = generate_order(temperature, top_k, top_p, min_p, penalty)
        assert names == order, (pname, names, order)
        for r, logits in enumerate(base):
            ctx = torch.tensor([contexts[r]], dtype=torch.long)
            scores = logits.clone().float().unsqueeze(0)
            out = processors(temperature, top_k, top_p, min_p, penalty)(ctx, scores)[0]
            probs = torch.softmax(out.double(), dim=-1)
            rows.append({
                "name": f"{pname}/row{r}", "logits": [float(x) for x in logits.float()], "context": contexts[r],
                "temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p,
                "repetition_penalty": penalty,
                "scores": [None if x == float("-inf") else float(x) for x in out],
                "probs": [float(x) for x in probs],
            })
    with open(OUT, "w") as f:
        json.dump({"generator": "tools/oracle/sampling_goldens.py", "transformers": transformers.__version__,
                   "torch": torch.__version__, "vocab": V, "cases": rows}, f)
        f.write("\n")
    print(f"wrote {len(rows)} cases to {OUT}")


if __name__ == "__main__":
    main()
