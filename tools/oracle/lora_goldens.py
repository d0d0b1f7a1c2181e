#!/usr/bin/env python3
"""Golden fixtures for LoRA, from Hugging Face transformers + peft (the oracle).

For each case this writes tests/fixtures/lora/<name>/ over a base model of tests/fixtures/qwen3,
qwen3_moe or qwen3_5 (not copied: golden.json names it):
  adapter/                         a PEFT adapter folder (PeftModel.save_pretrained:
                                   adapter_config.json, adapter_model.safetensors) with random,
                                   non-zero A and B so every gradient is exercised
  golden.safetensors               f32 `logits` [B, S, V] and the gradient of the mean loss for
                                   every adapter tensor, under titan's names (PEFT's without
                                   "base_model.model." and with no adapter name)
  trained.safetensors              the adapters after `steps` torch.optim.AdamW steps on the same
                                   batch (base frozen), same names
  golden.json                      {"base", "loss", "step_losses", "adamw": {...}, versions,
                                   "oracle_f32_vs_f64": this f32 run's distance to the same run in
                                   f64 (loss, logits, grad_rel, step_loss, trained_rel; cases made
                                   before it was added lack it)}
  golden_bf16_base.safetensors     the same adapters on the base loaded in bf16 (titan's
  golden_bf16_base.json            [lora] base_dtype = "bf16"): PEFT keeps the adapters in f32
                                   (autocast_adapter_dtype, its default) and casts their input to
                                   f32, the base runs in bf16 end to end (activations, norms'
                                   outputs, logits bf16); loss and adapter gradients, same names
The loss is transformers' own: model(input_ids, labels=input_ids).loss.
A case with target_parameters (PEFT's ParamWrapper on the MoE router weight and the fused expert
parameters of a qwen3_moe base) gets no bf16-base golden; its adapter tensors are named for titan
by the parameter they adapt (model.layers.0.mlp.experts.gate_up_proj.lora_A.weight,
model.layers.0.mlp.gate.weight.lora_A.weight), not by PEFT's wrapper nesting.
The qwen3_5 cases run transformers' torch fallbacks of the Gated DeltaNet (torch chunk rule, torch
causal conv), as tools/oracle/qwen3_5_goldens.py made their bases with.

Run: python tools/oracle/lora_goldens.py [--out tests/fixtures/lora] [--bf16-base-only] [--case NAME]
(--bf16-base-only: only the golden_bf16_base files, from the adapter folders already there;
--case: only that case)
Needs: pip install torch transformers peft safetensors (never needed to build or test titan).
"""
import argparse
import json
import os

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tests", "fixtures")

# name, base (under tests/fixtures), rank, alpha, targets (PEFT suffixes), use_rslora, target_parameters
CASES = [
    ("all_linear_r4", "qwen3/tied_gqa2_hd16", 4, 8.0,
     ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], False, None),
    ("qv_down_rslora", "qwen3/untied_gqa2_long", 3, 5.0, ["q_proj", "v_proj", "down_proj"], True, None),
    # layer 0: both expert parameters (nested wrappers) and the router; layer 1: gate_up_proj alone
    # and the router; q_proj everywhere (modules and parameters in one adapter). The aux loss is on.
    ("moe_experts_router", "qwen3_moe/aux_norm", 2, 3.0, ["q_proj"], False,
     ["model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj", "mlp.gate.weight",
      "model.layers.1.mlp.experts.gate_up_proj"]),
    # Qwen3.5: every linear projection, by PEFT's own names: the gated attention layer's (q_proj's
    # rows hold each head's query then its gate), the Gated DeltaNet's five, the MLP's three.
    ("qwen3_5_all_linear", "qwen3_5/dense_lin_lin_full", 3, 6.0,
     ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj",
      "gate_proj", "up_proj", "down_proj"], False, None),
    # qwen3_5_moe: the same mixer targets, the shared expert's linears (matched by their last part),
    # its sigmoid gate shared_expert_gate, and the router and fused experts as target_parameters.
    ("qwen3_5_moe_shared", "qwen3_5/moe_lin_full", 2, 4.0,
     ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj",
      "gate_proj", "up_proj", "down_proj", "shared_expert_gate"], False,
     ["mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"]),
]
ADAMW = {"lr": 2e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "steps": 5}


def titan_names(model):
    """PEFT parameter name -> titan's: without "base_model.model." and the adapter name; a
    ParamWrapper's (target_parameters) under the parameter it adapts."""
    wrappers = {}
    for mname, mod in model.named_modules():
        if hasattr(mod, "parameter_name") and hasattr(mod, "lora_A"):
            short = mname[len("base_model.model."):]
            wrappers[short + "."] = short.replace(".base_layer", "") + "." + mod.parameter_name + "."
    out = {}
    for n, _ in model.named_parameters():
        t = n[len("base_model.model."):] if n.startswith("base_model.model.") else n
        t = t.replace(".default", "")
        for w, param in wrappers.items():
            if t.startswith(w) and t[len(w):].startswith("lora_"):
                t = param + t[len(w):]
        out[n] = t
    return out


def read_ids(path):
    with open(path) as f:
        return torch.tensor([[int(t) for t in line.split()] for line in f if line.strip()])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(FIXTURES, "lora"))
    ap.add_argument("--bf16-base-only", action="store_true")
    ap.add_argument("--case")
    args = ap.parse_args()
    torch.set_num_threads(2)
    for i, (name, base, r, alpha, targets, rslora, params) in enumerate(CASES):
        if args.case and name != args.case:
            continue
        if args.bf16_base_only:
            if params:
                continue
            bf16_base_golden(os.path.join(args.out, name), base)
            continue
        base_dir = os.path.join(FIXTURES, base)
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
        cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, use_rslora=rslora,
                         bias="none", task_type="CAUSAL_LM", target_parameters=params)
        model = get_peft_model(model, cfg)
        titan_name = titan_names(model).__getitem__
        torch.manual_seed(4321 + i)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_" in pname:
                    p.copy_(0.3 * torch.randn_like(p))
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        adir = os.path.join(out, "adapter")
        model.save_pretrained(adir)
        os.remove(os.path.join(adir, "README.md"))  # a generated model card, not needed
        with open(os.path.join(adir, "adapter_config.json")) as f:
            ac = json.load(f)
        ac["base_model_name_or_path"] = base  # not this machine's absolute path
        if isinstance(ac.get("target_modules"), list):  # a set in PEFT: its order varies run to run
            ac["target_modules"] = sorted(ac["target_modules"])
        with open(os.path.join(adir, "adapter_config.json"), "w") as f:
            json.dump(ac, f, indent=2, sort_keys=True)
        ids = read_ids(os.path.join(base_dir, "tokens.txt"))
        lora = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        assert lora and all("lora_" in n for n, _ in lora)
        model.zero_grad()
        res = model(input_ids=ids, labels=ids)
        res.loss.backward()
        tensors = {"logits": res.logits.detach().float().contiguous()}
        for n, p in lora:
            tensors[titan_name(n)] = p.grad.detach().float().contiguous()
        save_file(tensors, os.path.join(out, "golden.safetensors"), metadata={"format": "pt"})
        opt = torch.optim.AdamW([p for _, p in lora], lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]),
                                eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
        losses = []
        for _ in range(ADAMW["steps"]):
            opt.zero_grad()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
        save_file({titan_name(n): p.detach().float().contiguous() for n, p in lora},
                  os.path.join(out, "trained.safetensors"), metadata={"format": "pt"})
        meta = {"base": base, "loss": float(res.loss.item()), "step_losses": losses, "adamw": ADAMW,
                "transformers": __import__("transformers").__version__,
                "peft": __import__("peft").__version__, "torch": torch.__version__}
        meta["oracle_f32_vs_f64"] = f64_deviation(out, base, tensors, losses, meta["loss"],
                                                  {titan_name(n): p.detach().float() for n, p in lora})
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(name, "loss", res.loss.item(), "after", losses)
        if not params:
            bf16_base_golden(out, base)


def f64_deviation(out, base, golden, step_losses, loss, trained):
    """How far this f32 oracle is from the same PEFT run in f64 (same adapter folder, same AdamW
    steps): the f32 rounding of the oracle itself, which bounds how close another f32
    implementation can be held to it. Recurrent mixers (Qwen3.5's Gated DeltaNet) with large random
    adapters amplify it through the AdamW steps (Adam's first steps move each element by about lr
    whatever its gradient's size, so a tiny gradient's rounding changes the step)."""
    base_dir = os.path.join(FIXTURES, base)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float64, attn_implementation="eager",
                                                 experts_implementation="eager")  # grouped_mm has no f64
    model = PeftModel.from_pretrained(model, os.path.join(out, "adapter"), is_trainable=True,
                                      autocast_adapter_dtype=False).double()
    titan_name = titan_names(model).__getitem__
    lora = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    ids = read_ids(os.path.join(base_dir, "tokens.txt"))
    res = model(input_ids=ids, labels=ids)
    res.loss.backward()

    def rel(a, b):
        return float((a.double() - b.double()).abs().max() / b.double().abs().max())

    dev = {"loss": abs(float(res.loss.item()) - loss),
           "logits": float((res.logits.detach() - golden["logits"].double()).abs().max()),
           "grad_rel": max(rel(p.grad, golden[titan_name(n)]) for n, p in lora)}
    opt = torch.optim.AdamW([p for _, p in lora], lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]),
                            eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    worst = 0.0
    for s in range(ADAMW["steps"]):
        opt.zero_grad()
        l = model(input_ids=ids, labels=ids).loss
        l.backward()
        opt.step()
        worst = max(worst, abs(float(l.item()) - step_losses[s]))
    dev["step_loss"] = worst
    dev["trained_rel"] = max(rel(p.detach(), trained[titan_name(n)]) for n, p in lora)
    print(os.path.basename(out), "f32 oracle vs f64:", dev)
    return dev


def bf16_base_golden(out, base):
    """Loss and adapter gradients of the case's adapter on the base loaded in bf16."""
    base_dir = os.path.join(FIXTURES, base)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16, attn_implementation="eager")
    model = PeftModel.from_pretrained(model, os.path.join(out, "adapter"), is_trainable=True,
                                      autocast_adapter_dtype=True)
    lora = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert lora and all("lora_" in n and p.dtype == torch.float32 for n, p in lora)
    titan_name = titan_names(model).__getitem__
    assert all(p.dtype == torch.bfloat16 for n, p in model.named_parameters() if "lora_" not in n)
    ids = read_ids(os.path.join(base_dir, "tokens.txt"))
    model.zero_grad()
    res = model(input_ids=ids, labels=ids)
    res.loss.backward()
    save_file({titan_name(n): p.grad.detach().float().contiguous() for n, p in lora},
              os.path.join(out, "golden_bf16_base.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "golden_bf16_base.json"), "w") as f:
        json.dump({"base": base, "base_dtype": "bfloat16", "loss": float(res.loss.item()),
                   "transformers": __import__("transformers").__version__,
                   "peft": __import__("peft").__version__, "torch": torch.__version__}, f, indent=1)
    print(os.path.basename(out), "bf16 base: loss", res.loss.item())


if __name__ == "__main__":
    main()
