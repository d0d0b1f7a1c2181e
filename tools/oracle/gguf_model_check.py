#!/usr/bin/env python3
"""transformers' side of the GGUF import check (tests/cli/smollm2_gguf.sh).

transformers loads the GGUF file itself (its own dequantization, q/k un-permutation and tokenizer
conversion; `pip install gguf`), independently of `titan import gguf`, and this script compares:
  --titan-ids FILE   titan's token ids (`titan encode --jsonl`, one document per line) of the first
                     documents of --docs against transformers' GGUF tokenizer, id for id, twice:
                     "tokenizer_mismatches": with the pre-tokenizer llama.cpp defines for the
                     file's tokenizer.ggml.pre (for "smollm": each digit split off first, then
                     GPT-2's expression -- what the model was trained with); "stock_mismatches":
                     transformers' GGUF tokenizer as it is, which has no entry for "smollm" and
                     uses GPT-2's expression alone (it differs where whitespace runs precede a digit)
  --tokens FILE      a token batch (one sequence per line): transformers' mean next-token loss on
                     it, printed for the caller to compare with `titan score`
Prints one JSON line: {"docs", "tokens_compared", "tokenizer_mismatches", "first_mismatch",
"stock_mismatches", "stock_first_mismatch", "loss"}.
"""
import argparse
import json
import os
import sys

import torch
from gguf import GGUFReader
from tokenizers import Regex, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

# llama.cpp's pre-tokenizer splits (llama-vocab.cpp) that transformers' GGUF loader lacks.
LLAMA_CPP_DIGITS_FIRST = {"smollm", "starcoder", "refact"}


def compare(tok, docs, titan_ids):
    mismatches, first, compared = 0, None, 0
    for i, (text, mine) in enumerate(zip(docs, titan_ids)):
        ref = tok(text, add_special_tokens=False)["input_ids"]
        compared += len(ref)
        if ref != mine:
            mismatches += 1
            if first is None:
                k = next((j for j, (x, y) in enumerate(zip(ref, mine)) if x != y), min(len(ref), len(mine)))
                first = {"doc": i, "at": k, "transformers": ref[k:k + 5], "titan": mine[k:k + 5]}
    return mismatches, first, compared


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--docs", required=True)
    ap.add_argument("--titan-ids", required=True)
    ap.add_argument("--tokens", required=True)
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    d, f = os.path.split(os.path.abspath(a.gguf))
    titan_ids = [[int(x) for x in line.split()] for line in open(a.titan_ids)]
    docs = [json.loads(line)["text"] for line in open(a.docs)][: len(titan_ids)]
    stock = AutoTokenizer.from_pretrained(d, gguf_file=f)
    stock_mism, stock_first, _ = compare(stock, docs, titan_ids)
    field = GGUFReader(a.gguf).fields.get("tokenizer.ggml.pre")
    pre = bytes(field.parts[field.data[0]]).decode() if field else "default"
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    if pre in LLAMA_CPP_DIGITS_FIRST:
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    mismatches, first, compared = compare(tok, docs, titan_ids)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager")
    ids = torch.tensor([[int(t) for t in line.split()] for line in open(a.tokens) if line.strip()])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss.item()
    print(json.dumps({"docs": len(docs), "pre_tokenizer": pre, "tokens_compared": compared,
                      "tokenizer_mismatches": mismatches, "first_mismatch": first,
                      "stock_mismatches": stock_mism, "stock_first_mismatch": stock_first, "loss": loss}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
