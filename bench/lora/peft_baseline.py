#!/usr/bin/env python3
"""PEFT on PyTorch eager: LoRA (or full fine-tuning) training steps of transformers'
Qwen3ForCausalLM at the Qwen3-0.6B shapes (random weights), forward + backward + AdamW over the
trained parameters. Prints one JSON line: tokens/s (median of the measured steps), peak RSS.

Run by bench/lora/run.sh with the same threads as titan.
"""
import argparse
import json
import resource
import statistics
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--rank", type=int, default=16, help="0: full fine-tuning")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=a.layers,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                      max_position_embeddings=40960, rope_theta=1000000.0, use_cache=False)
    cfg._attn_implementation = "sdpa"
    model = Qwen3ForCausalLM(cfg).float().train()
    if a.rank > 0:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(
            r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1)
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq))
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    tps = a.batch * a.seq / statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(json.dumps({"tokens_per_s": tps, "max_rss_gib": rss, "trained_params": sum(p.numel() for p in params)}))


if __name__ == "__main__":
    main()
