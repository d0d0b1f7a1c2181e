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

Run: python tools/oracle/gguf_fixtures.py [--out tests/fixtures/gguf]
Needs: pip install gguf numpy safetensors (never needed to build or test titan).
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


if __name__ == "__main__":
    main()
