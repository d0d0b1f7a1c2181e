"""What the model golden generators (qwen3_goldens.py, family_goldens.py, qwen3_moe_goldens.py)
share: random, non-trivial weights for a tiny transformers model, and the fixture folder layout
  config.json, model.safetensors   an HF checkpoint folder (save_pretrained, float32)
  tokens.txt                       the token batch, one sequence per line (titan score's input)
  golden.safetensors               f32 `logits` [B, S, V] and one gradient per HF parameter name
  golden.json                      {"loss": ..., "tokens": ..., versions, and what a caller adds}
"""
import json
import os

import torch
from safetensors.torch import save_file


def randomize(model, seed, vocab, batch, seq):
    """Norm weights near 1 and every other parameter (biases too) N(0, 0.15^2), so that every
    gradient is exercised; then a token batch [batch, seq] from its own generator (seed + 1)."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randint(0, vocab, (batch, seq), generator=g)


def plain_grads(model):
    return {pname: p.grad.detach().float().contiguous() for pname, p in model.named_parameters()}


def write_fixture(out, model, ids, grads=plain_grads, extra=None):
    """Saves the folder, runs model(ids, labels=ids) forward and backward, writes the goldens.
    grads(model) maps the parameters' gradients to the fixture's names. Returns the loss."""
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    p = os.path.join(out, "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    model.zero_grad()
    res = model(input_ids=ids, labels=ids)
    res.loss.backward()
    tensors = {"logits": res.logits.detach().float().contiguous()}
    tensors.update(grads(model))
    save_file(tensors, os.path.join(out, "golden.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "tokens.txt"), "w") as f:
        for row in ids.tolist():
            f.write(" ".join(str(t) for t in row) + "\n")
    meta = {"loss": float(res.loss.item())}
    meta.update(extra or {})
    meta.update({"tokens": ids.shape[0] * (ids.shape[1] - 1),
                 "transformers": __import__("transformers").__version__, "torch": torch.__version__})
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return res.loss.item()
