#!/usr/bin/env python3
"""GGUF dequantization fixtures from the `gguf` Python package (PyPI; llama.cpp's gguf-py).

Writes tests/fixtures/gguf/:
  quants.gguf                 one tensor per ggml type, named by the type, shape [2, 512]
                              (ne = [512, 2]), written by gguf.GGUFWriter
  quants_expected.safetensors the same names: f32 [2, 512], the values gguf.dequantize gives
For F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 the bytes are gguf.quantize of random normals; the
K-quants (Q2_K ... Q6_K) have no quantizer in gguf-py, so their blocks are random bytes with
finite random f16 scales, which exercises every bit of the packed quants and scales. gguf-py has no
Q8_K dequantizer: its expected values are d * q per the format (f32 d, int8 q[256], i16 sums[16]).

And two tiny model files for the import (tests/unit/model/test_gguf_import.cpp), each the f32
weights of a family golden (tests/fixtures/{llama,qwen2}/tied_gqa2, family_goldens.py) under
llama.cpp's tensor names, with the llama q/k rows permuted as llama.cpp's converter does
(reshape(n_head, 2, D/2, cols).swapaxes(1, 2)) and a small byte-level tokenizer in the metadata:
  tiny_llama.gguf, tiny_qwen2.gguf

And two Qwen3.5 files, the f32 weights of the Qwen3.5 goldens tests/fixtures/qwen3_5/
dense_lin_lin_full (linear heads 2 key / 4 value: the value-head reorder is not the identity) and
moe_lin_full, written as llama.cpp's converter writes Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM
(conversion/qwen.py: Qwen3_5TextModel, Qwen3_5MoeTextModel and the classes they build on), with
the tensor names from gguf-py's own map (gguf.get_tensor_name_map(MODEL_ARCH.QWEN35[MOE])):
  - the value heads of the linear layers reordered from grouped by key head to tiled
    (_LinearAttentionVReorderBase: in_proj_qkv's v rows, in_proj_z, in_proj_b/a, A_log, dt_bias,
    conv1d's v channels, out_proj's columns);
  - A_log stored as -exp(A_log) (ssm_a), dt_bias as ssm_dt.bias, conv1d squeezed to [C, K];
  - every weight named *norm.weight but linear_attn.norm.weight stored as 1 + w;
  - stacked experts, the metadata of Qwen3NextModel.set_gguf_parameters (ssm.*, full_attention_interval,
    rope.dimension_count = head_dim * partial_rotary_factor) and rope.dimension_sections;
  - the dense file also has one multi-token-prediction block (nextn_predict_layers 1,
    block_count 4: blk.3.*), which import must skip.
  tiny_qwen35.gguf, tiny_qwen35moe.gguf

Run: python tools/oracle/gguf_fixtures.py [--out tests/fixtures/gguf]
Needs: pip install gguf numpy safetensors (gguf >= 0.19 for the Qwen3.5 names) (never needed to build or test titan).
"""
import argparse
import os

import json

import numpy as np
from safetensors.numpy import load_file
from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES, GGUFWriter, dequantize, quantize
from safetensors.numpy import save_file

ROWS, COLS = 2, 512
QUANTIZED = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
RANDOM_BLOCKS = {  # type: byte offsets of the f16 scales inside a block
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def random_blocks(rng, qtype, f16_at):
    block, size = GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in f16_at:
        scales = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(ROWS, -1)


GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def llama_cpp_permute(w, n_head):  # llama.cpp convert_hf_to_gguf.py's LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tiny_model(src_dir, arch, path):
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    weights = load_file(os.path.join(src_dir, "model.safetensors"))
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = GGUFWriter(path, arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_dimension_count(cfg["hidden_size"] // heads)
    w.add_vocab_size(cfg["vocab_size"])
    # A byte-level vocabulary: the printable bytes from "!" ("a" is id 64), the merge "a b" -> "ab"
    # and two control tokens (the other bytes have no token: encoding drops them).
    V = cfg["vocab_size"]
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))  # GPT-2's own-spelled bytes
    tokens = [chr(b) for b in printable[:V - 3]] + ["ab", "<|im_start|>", "<|im_end|>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([1] * (V - 2) + [3, 3])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(V - 2)
    w.add_eos_token_id(V - 1)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    for name in sorted(weights):
        t = weights[name].astype(np.float32)
        if name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif name == "model.norm.weight":
            g = "output_norm.weight"
        elif name == "lm_head.weight":
            g = "output.weight"
        else:
            layer, rest = name[len("model.layers."):].split(".", 1)
            g = f"blk.{layer}.{GGUF_NAMES[rest]}"
            if arch == "llama" and rest == "self_attn.q_proj.weight":
                t = llama_cpp_permute(t, heads)
            if arch == "llama" and rest == "self_attn.k_proj.weight":
                t = llama_cpp_permute(t, kv)
        w.add_tensor(g, np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def v_tiled(t, dim, hk, r, hd):  # _LinearAttentionVReorderBase._reorder_v_heads, in numpy
    shape = list(t.shape)
    t = t.reshape(shape[:dim] + [hk, r, hd] + shape[dim + 1:])
    return np.ascontiguousarray(np.swapaxes(t, dim, dim + 1)).reshape(shape)


def tiny_qwen35(src_dir, arch, path, mtp):
    import gguf
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    weights = load_file(os.path.join(src_dir, "model.safetensors"))
    L, types = cfg["num_hidden_layers"], cfg["layer_types"]
    every = types.index("full_attention") + 1  # the file stores only full_attention_interval
    assert types == ["linear_attention" if (i + 1) % every else "full_attention" for i in range(L)], types
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, r = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], hv // hk
    moe = arch == "qwen35moe"
    blocks = L + (1 if mtp else 0)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN35MOE if moe else gguf.MODEL_ARCH.QWEN35, blocks)
    w = GGUFWriter(path, arch)
    w.add_block_count(blocks)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    if not moe:
        w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    if moe:
        w.add_expert_count(cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(hk)
    w.add_ssm_time_step_rank(hv)
    w.add_ssm_inner_size(dv * hv)
    w.add_full_attention_interval(every)
    w.add_rope_dimension_count(int(cfg["head_dim"] * cfg["rope_parameters"]["partial_rotary_factor"]))
    w.add_rope_dimension_sections([11, 11, 10, 0])
    if mtp:
        w.add_nextn_predict_layers(1)
    V = cfg["vocab_size"]
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    tokens = [chr(b) for b in printable[:V - 3]] + ["ab", "<|im_start|>", "<|im_end|>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(tokens)
    w.add_token_types([1] * (V - 2) + [3, 3])
    w.add_token_merges(["a b"])
    w.add_eos_token_id(V - 1)
    out = {}
    experts = {}
    for name in sorted(weights):
        t = weights[name].astype(np.float32)
        if ".mlp.experts." in name:  # per expert -> stacked [E, ...] (Qwen2MoeModel.modify_tensors)
            layer, rest = name[len("model.layers."):].split(".", 1)
            e, proj = rest[len("mlp.experts."):].split(".", 1)
            experts.setdefault((int(layer), proj), {})[int(e)] = t
            continue
        if ".linear_attn." in name and hk != hv:  # grouped -> tiled value heads
            if name.endswith("in_proj_qkv.weight"):
                t = np.concatenate([t[:2 * hk * dk], v_tiled(t[2 * hk * dk:], 0, hk, r, dv)])
            elif name.endswith("in_proj_z.weight"):
                t = v_tiled(t, 0, hk, r, dv)
            elif name.endswith(("in_proj_b.weight", "in_proj_a.weight", "A_log", "dt_bias")):
                t = v_tiled(t, 0, hk, r, 1)
            elif name.endswith("conv1d.weight"):
                t = np.concatenate([t[:2 * hk * dk], v_tiled(t[2 * hk * dk:], 0, hk, r, dv)])
            elif name.endswith("out_proj.weight"):
                t = v_tiled(t, 1, hk, r, dv)
        if name.endswith(".A_log"):
            t = -np.exp(t)
        elif name.endswith(".dt_bias"):
            name = name[:-len(".dt_bias")] + ".dt_proj.bias"
        elif "conv1d" in name:
            t = t.squeeze()
        elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            t = t + np.float32(1)
        g = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert g is not None, name
        out[g] = np.ascontiguousarray(t, dtype=np.float32)
    for (layer, proj), per in sorted(experts.items()):
        g = names.get_name(f"model.layers.{layer}.mlp.experts.{proj}", try_suffixes=(".weight",))
        assert g is not None, proj
        out[g] = np.ascontiguousarray(np.stack([per[e] for e in sorted(per)]))
    if mtp:  # a stand-in MTP block: a few of its tensors under block L, values that must not be read
        rng = np.random.default_rng(7)
        H = cfg["hidden_size"]
        for g, shape in [(f"blk.{L}.attn_norm.weight", (H,)), (f"blk.{L}.nextn.eh_proj.weight", (H, 2 * H)),
                         (f"blk.{L}.nextn.enorm.weight", (H,)), (f"blk.{L}.attn_q.weight", (2 * H, H))]:
            out[g] = rng.standard_normal(shape).astype(np.float32)
    for g in sorted(out):
        w.add_tensor(g, out[g])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, len(out), "tensors")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "gguf"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(20260301)
    w = GGUFWriter(os.path.join(args.out, "quants.gguf"), "llama")
    expected = {}
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    w.add_tensor("F32", x)
    expected["F32"] = x
    for qt in QUANTIZED:
        x = (rng.standard_normal((ROWS, COLS)) * 0.7).astype(np.float32)
        raw = quantize(x, qt)
        w.add_tensor(qt.name, raw, raw_shape=raw.shape, raw_dtype=qt)
        expected[qt.name] = dequantize(raw, qt).astype(np.float32).reshape(ROWS, COLS)
    for qt, f16_at in RANDOM_BLOCKS.items():
        raw = random_blocks(rng, qt, f16_at)
        w.add_tensor(qt.name, raw, raw_shape=raw.shape, raw_dtype=qt)
        expected[qt.name] = dequantize(raw, qt).astype(np.float32).reshape(ROWS, COLS)
    # Q8_K: f32 d, int8 q[256], int16 bsums[16] (292 bytes).
    n_blocks = ROWS * COLS // 256
    d = (rng.standard_normal(n_blocks) * 0.01).astype(np.float32)
    q = rng.integers(-128, 128, size=(n_blocks, 256)).astype(np.int8)
    sums = q.reshape(n_blocks, 16, 16).astype(np.int16).sum(axis=-1).astype(np.int16)
    raw = np.concatenate([d.view(np.uint8).reshape(n_blocks, 4), q.view(np.uint8), sums.view(np.uint8)], axis=1)
    w.add_tensor("Q8_K", raw.reshape(ROWS, -1), raw_shape=(ROWS, raw.size // ROWS), raw_dtype=T.Q8_K)
    expected["Q8_K"] = (d[:, None] * q.astype(np.float32)).reshape(ROWS, COLS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file({k: np.ascontiguousarray(v) for k, v in expected.items()}, os.path.join(args.out, "quants_expected.safetensors"))
    for k, v in expected.items():
        print(k, v.shape, float(np.abs(v).max()))
    fixtures = os.path.join(args.out, "..")
    tiny_model(os.path.join(fixtures, "llama", "tied_gqa2"), "llama", os.path.join(args.out, "tiny_llama.gguf"))
    tiny_model(os.path.join(fixtures, "qwen2", "tied_gqa2"), "qwen2", os.path.join(args.out, "tiny_qwen2.gguf"))
    tiny_qwen35(os.path.join(fixtures, "qwen3_5", "dense_lin_lin_full"), "qwen35",
                os.path.join(args.out, "tiny_qwen35.gguf"), mtp=True)
    tiny_qwen35(os.path.join(fixtures, "qwen3_5", "moe_lin_full"), "qwen35moe",
                os.path.join(args.out, "tiny_qwen35moe.gguf"), mtp=False)


if __name__ == "__main__":
    main()
