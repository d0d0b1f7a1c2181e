#!/usr/bin/env python3
"""Golden fixtures for the Qwen3-MoE model, from Hugging Face transformers (the oracle).

For each tiny configuration this writes tests/fixtures/qwen3_moe/<name>/:
  config.json, model.safetensors   an HF checkpoint folder (save_pretrained, float32; transformers
                                   5 writes the per-expert layout mlp.experts.E.{gate,up,down}_proj)
  tokens.txt                       the token batch, one sequence per line (titan score's input)
  golden.safetensors               f32 `logits` [B, S, V] and the gradient of transformers' loss for
                                   every parameter under its per-expert HF name (the fused
                                   experts.gate_up_proj [E, 2I, H] grad split as gate = [e, :I],
                                   up = [e, I:]; experts.down_proj [E, H, I] as down = [e])
  golden.json                      {"loss": transformers' loss with the config's output_router_logits,
                                    "loss_ce": the cross-entropy alone, "aux_loss": the unweighted
                                    load-balancing loss, "loss_with_aux": ce + coef * aux, ...}
The loss is model(input_ids, labels=input_ids).loss: with output_router_logits true it already
includes router_aux_loss_coef * load_balancing_loss_func(router logits of every sparse layer).

Ties: torch.topk's choice among exactly equal probabilities is implementation-defined; titan sends
ties to the lower expert index. Random f32 weights make exact ties vanishingly unlikely; the script
checks that no token has a tie at its top-k boundary in any sparse layer and fails otherwise.

Run: python tools/oracle/qwen3_moe_goldens.py [--out tests/fixtures/qwen3_moe]
Needs: pip install torch transformers safetensors (never needed to build or test titan).
"""
import argparse
import os

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from model_goldens import randomize, write_fixture

# name: config fields beyond the shared ones, batch, seq
CASES = [
    # every layer sparse, aux loss in the loss (a large coefficient so that its gradient matters)
    ("aux_norm", dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_hidden_layers=2,
                      intermediate_size=48, moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2,
                      vocab_size=96, norm_topk_prob=True, output_router_logits=True, router_aux_loss_coef=0.5,
                      tie_word_embeddings=False), 2, 7),
    # no aux loss, weights not renormalized, top-3 of 6, tied embedding
    ("noaux_nonorm_tied", dict(hidden_size=24, num_attention_heads=2, num_key_value_heads=1, head_dim=12,
                               num_hidden_layers=2, intermediate_size=40, moe_intermediate_size=10, num_experts=6,
                               num_experts_per_tok=3, vocab_size=80, norm_topk_prob=False,
                               output_router_logits=False, tie_word_embeddings=True), 3, 5),
    # decoder_sparse_step 2 with mlp_only_layers: of 4 layers only layer 1 is sparse (3 is listed)
    ("step2_mlponly", dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                           num_hidden_layers=4, intermediate_size=40, moe_intermediate_size=12, num_experts=4,
                           num_experts_per_tok=2, vocab_size=64, norm_topk_prob=True, decoder_sparse_step=2,
                           mlp_only_layers=[3], output_router_logits=True, router_aux_loss_coef=0.3,
                           tie_word_embeddings=False), 2, 9),
]


def build(fields, batch, seq, seed):
    cfg = Qwen3MoeConfig(max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6, attention_bias=False,
                         use_sliding_window=False, **fields)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # the plain loop over experts (grouped_mm wants aligned strides)
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(cfg).float()
    return model, randomize(model, seed, cfg.vocab_size, batch, seq)


def check_no_ties(router_logits, k):
    for lg in router_logits:
        p = torch.softmax(lg.float(), dim=-1)
        s, _ = torch.sort(p, dim=-1, descending=True)
        if s.shape[-1] > k:
            assert bool((s[:, k - 1] != s[:, k]).all()), "exact tie at the top-k boundary; change the seed"


def per_expert_grads(model):
    out = {}
    for pname, p in model.named_parameters():
        gr = p.grad.detach().float()
        if pname.endswith("mlp.experts.gate_up_proj"):
            base = pname[: -len("gate_up_proj")]
            inter = gr.shape[1] // 2
            for e in range(gr.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = gr[e, :inter].contiguous()
                out[f"{base}{e}.up_proj.weight"] = gr[e, inter:].contiguous()
        elif pname.endswith("mlp.experts.down_proj"):
            base = pname[: -len("down_proj")]
            for e in range(gr.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = gr[e].contiguous()
        else:
            out[pname] = gr.contiguous()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                                                  "qwen3_moe"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    for i, (name, fields, batch, seq) in enumerate(CASES):
        model, ids = build(fields, batch, seq, 4321 + i)
        cfg = model.config
        with torch.no_grad():  # CE alone and the aux loss, whatever the config says
            r = model(input_ids=ids, labels=ids, output_router_logits=True)
            check_no_ties(r.router_logits, cfg.num_experts_per_tok)
            ce = model(input_ids=ids, labels=ids, output_router_logits=False).loss.item()
            aux = r.aux_loss.item()
        loss = write_fixture(os.path.join(args.out, name), model, ids, grads=per_expert_grads,
                             extra={"loss_ce": ce, "aux_loss": aux, "loss_with_aux": ce + cfg.router_aux_loss_coef * aux,
                                    "output_router_logits": bool(cfg.output_router_logits)})
        print(name, "loss", loss, "ce", ce, "aux", aux)


if __name__ == "__main__":
    main()
