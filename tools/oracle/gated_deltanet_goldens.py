#!/usr/bin/env python3
"""Golden values for the Gated DeltaNet ops and layer of Qwen3.5, from transformers' qwen3_5 torch
fallbacks (torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule, Qwen3_5GatedDeltaNet).

Writes tests/fixtures/qwen3_5/gated_deltanet.json:
  delta:  cases of the delta rule (f32, use_qk_l2norm_in_kernel=True, chunk_size 64): inputs, the chunked
          output and final state, the recurrent function's output, and autograd gradients of
          sum(out * dout) + sum(final_state * dfin) through the chunked function;
  packed: documents run one by one through the chunked function, concatenated (a packed row's golden);
  layer:  a small Qwen3_5GatedDeltaNet on random weights: input, output, and the gradients of
          sum(y * dy) w.r.t. the input and every parameter.
Every f32 value is the shortest decimal that reads back to the same f32.

    /work/venv/bin/python tools/oracle/gated_deltanet_goldens.py
"""
import json
import os

import torch
import transformers
from transformers.models.qwen3_5 import modeling_qwen3_5 as m

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "qwen3_5")


def f32(t):
    return [float(str(x)) for x in t.detach().to(torch.float32).reshape(-1).numpy()]


def delta_case(gen, B, S, Hk, Hv, dk, dv, state):
    r = lambda *s: torch.randn(*s, generator=gen)
    q, k, v = r(B, S, Hk, dk), r(B, S, Hk, dk), r(B, S, Hv, dv)
    g = -torch.nn.functional.softplus(r(B, S, Hv) - 1.0)
    beta = torch.sigmoid(r(B, S, Hv))
    init = 0.5 * r(B, Hv, dk, dv) if state else None
    dout, dfin = r(B, S, Hv, dv), r(B, Hv, dk, dv)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
    init_l = init.clone().requires_grad_(True) if state else None
    out, fin = m.torch_chunk_gated_delta_rule(*leaves[:3], g=leaves[3], beta=leaves[4], initial_state=init_l,
                                              output_final_state=True, use_qk_l2norm_in_kernel=True)
    loss = (out * dout).sum() + ((fin * dfin).sum() if state else 0.0)
    loss.backward()
    with torch.no_grad():
        rec, rfin = m.torch_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=init,
                                                       output_final_state=True, use_qk_l2norm_in_kernel=True)
    c = {"B": B, "S": S, "Hk": Hk, "Hv": Hv, "dk": dk, "dv": dv, "state": state,
         "q": f32(q), "k": f32(k), "v": f32(v), "g": f32(g), "beta": f32(beta), "dout": f32(dout),
         "out": f32(out), "final_state": f32(fin), "out_recurrent": f32(rec), "final_state_recurrent": f32(rfin),
         "dq": f32(leaves[0].grad), "dk_": f32(leaves[1].grad), "dv_": f32(leaves[2].grad),
         "dg": f32(leaves[3].grad), "dbeta": f32(leaves[4].grad)}
    if state:
        c.update({"initial_state": f32(init), "dfin": f32(dfin), "d_initial_state": f32(init_l.grad)})
    return c


def packed_case(gen, lengths, Hk, Hv, dk, dv):
    S = sum(lengths)
    r = lambda *s: torch.randn(*s, generator=gen)
    q, k, v = r(1, S, Hk, dk), r(1, S, Hk, dk), r(1, S, Hv, dv)
    g = -torch.nn.functional.softplus(r(1, S, Hv) - 1.0)
    beta = torch.sigmoid(r(1, S, Hv))
    outs, a = [], 0
    for n in lengths:
        o, _ = m.torch_chunk_gated_delta_rule(q[:, a:a + n], k[:, a:a + n], v[:, a:a + n], g=g[:, a:a + n],
                                              beta=beta[:, a:a + n], use_qk_l2norm_in_kernel=True)
        outs.append(o)
        a += n
    return {"lengths": lengths, "Hk": Hk, "Hv": Hv, "dk": dk, "dv": dv, "q": f32(q), "k": f32(k), "v": f32(v),
            "g": f32(g), "beta": f32(beta), "out": f32(torch.cat(outs, dim=1))}


def layer_case(gen, S):
    cfg = transformers.Qwen3_5TextConfig(hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4,
                                         linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                                         num_hidden_layers=1, layer_types=["linear_attention"], rms_norm_eps=1e-6,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                         intermediate_size=64, vocab_size=64)
    layer = m.Qwen3_5GatedDeltaNet(cfg, 0).float()
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name == "norm.weight":
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name in ("A_log", "dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
    x = torch.randn(1, S, 32, generator=gen).requires_grad_(True)
    y = layer(x)
    dy = torch.randn(y.shape, generator=gen)
    (y * dy).sum().backward()
    return {"hidden": 32, "Hk": 2, "Hv": 4, "dk": 8, "dv": 8, "K": 4, "S": S, "eps": 1e-6,
            "x": f32(x), "y": f32(y), "dy": f32(dy), "dx": f32(x.grad),
            "params": {n: f32(p) for n, p in layer.named_parameters()},
            "shapes": {n: list(p.shape) for n, p in layer.named_parameters()},
            "grads": {n: f32(p.grad) for n, p in layer.named_parameters()}}


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(20260101)
    delta = [delta_case(gen, 1, 70, 2, 2, 8, 8, True),   # longer than a chunk, not a multiple
             delta_case(gen, 2, 37, 1, 2, 8, 8, True),     # GQA 2
             delta_case(gen, 1, 130, 1, 3, 4, 4, False),   # GQA 3, three chunks
             delta_case(gen, 1, 64, 1, 4, 4, 4, True)]     # GQA 4, one whole chunk
    out = {"source": f"transformers {transformers.__version__} qwen3_5 torch fallbacks, torch {torch.__version__}",
           "delta": delta, "packed": packed_case(gen, [5, 70, 1, 24], 1, 2, 8, 8), "layer": layer_case(gen, 67)}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "gated_deltanet.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
